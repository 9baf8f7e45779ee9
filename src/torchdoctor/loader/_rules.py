"""The DataLoader's own rules, and how many batches a measurement skips and counts: written once.

Every place that builds a DataLoader (a clone, a loader the ``--fix`` re-run rebuilds, the code
of a fix) goes through :func:`valid_loader_kwargs`; every place that times one (the loader-alone
measurement, the whole-step sweep, the re-run of a fix) through :func:`warm_batches` and
:func:`counted_batches`. Pure: nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: DataLoader arguments that only apply with worker processes, and the value each must take
#: without them: DataLoader raises for ``persistent_workers=True`` or a ``prefetch_factor`` when
#: ``num_workers=0`` (and for a ``multiprocessing_context``, reset only where one was given).
WORKER_ONLY: dict[str, Any] = {"persistent_workers": False, "prefetch_factor": None}

#: The ``prefetch_factor`` DataLoader uses with workers when none is given.
DEFAULT_PREFETCH_FACTOR = 2

#: Fewest whole rounds of ``num_workers`` batches a measurement counts. Over a window shorter
#: than a round, batches that were already in flight inflate the rate (16 sleeping workers
#: measured at 2x their real rate over 30 batches, see benchmarks/worker_sweep.py).
MIN_ROUNDS = 2

#: Fewest batches (or steps) skipped before counting, also without workers: the first batch
#: pays for creating the iterator.
MIN_WARM_BATCHES = 1


def valid_loader_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` as DataLoader accepts them.

    Without workers (``num_workers`` 0, or absent: its default) the worker-only arguments of
    :data:`WORKER_ONLY` take their single-process values, and a ``timeout`` is reset to 0 (the
    single-process iterator asserts it is 0). With workers, ``kwargs`` is returned unchanged.

    Args:
        kwargs: DataLoader keyword arguments, complete or partial.

    Returns:
        A new dict.
    """
    out = dict(kwargs)
    if out.get("num_workers", 0) == 0:
        out.update(WORKER_ONLY)
        if out.get("multiprocessing_context") is not None:  # a script's "spawn"
            out["multiprocessing_context"] = None
        if out.get("timeout"):
            out["timeout"] = 0
    return out


def warm_batches(num_workers: int, prefetch_factor: int | None = None) -> int:
    """Batches (or steps) not counted after a loader starts.

    With workers, the ``num_workers x prefetch_factor`` batches dispatched when they start
    arrive at once and their timing is set by startup; without workers, the first batch pays
    for creating the iterator (:data:`MIN_WARM_BATCHES`).

    Args:
        num_workers: worker processes of the loader.
        prefetch_factor: the loader's setting; ``None`` means DataLoader's default
            (:data:`DEFAULT_PREFETCH_FACTOR`).
    """
    return max(MIN_WARM_BATCHES, num_workers * (prefetch_factor or DEFAULT_PREFETCH_FACTOR))


def counted_batches(num_workers: int, wanted: int) -> int:
    """Batches (or steps) to count: ``wanted``, raised to whole rounds of ``num_workers``.

    With workers, batches arrive in rounds (each worker finishes one at about the same time:
    several at once, then a wait), so a rate is only right over whole rounds, and at least
    :data:`MIN_ROUNDS` of them.
    """
    round_size = max(1, num_workers)
    rounds = max(MIN_ROUNDS, -(-wanted // round_size))
    return rounds * round_size


__all__ = [
    "DEFAULT_PREFETCH_FACTOR",
    "MIN_ROUNDS",
    "MIN_WARM_BATCHES",
    "WORKER_ONLY",
    "counted_batches",
    "valid_loader_kwargs",
    "warm_batches",
]
