"""Measure a real DataLoader at several ``num_workers``, without the model.

:func:`clone_loader` rebuilds a DataLoader from its construction settings (same dataset,
sampler or batch sampler, collate function, batch size, pinning, worker init, generator...) with
some of them overridden. :func:`measure_loader` times a clone at one worker count, and
:func:`sweep_loader` runs a :class:`~torchdoctor.analysis.worker_sweep.SweepPolicy` over clones.

This is the sweep for a model on an accelerator, where workers do not compete with the model
for the CPU. The user's loader is never iterated or changed; its workers are never started.
Random state that iterating a clone consumes (torch's global generator, the loader's and the
sampler's generators, Python's and numpy's global generators) is restored afterwards, so the
measurement does not change the user's training.
"""

from __future__ import annotations

import contextlib
import random
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ..analysis.worker_sweep import SweepPoint, SweepPolicy, WorkerSweep
from ..record import Stat

Clock = Callable[[], float]

#: Fewest whole rounds of ``num_workers`` batches a measurement counts. Over a window shorter
#: than a round, batches that were already in flight inflate the rate (16 sleeping workers
#: measured at 2x their real rate over 30 batches, see benchmarks/worker_sweep.py).
MIN_ROUNDS = 2


def clone_loader(loader: Any, **overrides: Any) -> Any:
    """A new DataLoader built with ``loader``'s construction settings, some overridden.

    Handles map-style and iterable datasets, ``batch_size=None`` (no automatic batching) and a
    custom ``batch_sampler``. When the result has ``num_workers=0``, ``prefetch_factor`` and
    ``persistent_workers`` are dropped (DataLoader rejects them then). A DataLoader subclass is
    rebuilt as its class when it does not override ``__init__``, else as a plain DataLoader.

    Args:
        loader: a ``torch.utils.data.DataLoader``.
        **overrides: DataLoader arguments to change, e.g. ``num_workers=4``.

    Returns:
        A fresh DataLoader; iterating it does not touch ``loader``'s iterator or workers.
    """
    from torch.utils.data import DataLoader, IterableDataset

    kwargs = loader_kwargs(loader)
    if "sampler" in overrides or "batch_size" in overrides or "shuffle" in overrides:
        # Re-batching with new sampling settings replaces the custom batch sampler.
        kwargs.pop("batch_sampler", None)
    if "shuffle" in overrides and "sampler" not in overrides:
        kwargs.pop("sampler", None)  # shuffle chooses the sampler
    kwargs.update(overrides)
    if isinstance(kwargs["dataset"], IterableDataset):
        kwargs.pop("sampler", None)
        kwargs.pop("shuffle", None)
    if kwargs.get("batch_sampler") is not None:
        for name in ("batch_size", "sampler", "shuffle", "drop_last"):
            kwargs.pop(name, None)
    if kwargs.get("num_workers", 0) == 0:
        kwargs["prefetch_factor"] = None
        kwargs["persistent_workers"] = False
        kwargs["timeout"] = 0  # the single-process iterator rejects a timeout
    cls = type(loader)
    if not (isinstance(loader, DataLoader) and cls.__init__ is DataLoader.__init__):
        cls = DataLoader
    with _no_worker_count_warning():
        return cls(**kwargs)


def loader_kwargs(loader: Any) -> dict[str, Any]:
    """The DataLoader arguments that would rebuild ``loader``."""
    kwargs: dict[str, Any] = {
        "dataset": loader.dataset,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": loader.persistent_workers,
    }
    for optional in ("pin_memory_device", "in_order"):  # newer DataLoader arguments
        if hasattr(loader, optional):
            kwargs[optional] = getattr(loader, optional)
    if loader.batch_size is None and loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler  # the user's own batch sampler
    else:
        kwargs["batch_size"] = loader.batch_size
        kwargs["drop_last"] = loader.drop_last
        kwargs["sampler"] = loader.sampler
    return kwargs


def shutdown_workers(loader_or_iterator: Any) -> None:
    """Stop the worker processes of a DataLoader iterator (or of a loader's persistent one).

    Safe to call more than once and on single-process iterators.
    """
    it = getattr(loader_or_iterator, "_iterator", loader_or_iterator)
    stop = getattr(it, "_shutdown_workers", None)
    if stop is not None:
        stop()


@contextlib.contextmanager
def preserved_random_state(loader: Any = None) -> Iterator[None]:
    """Restore every random generator that iterating a clone of ``loader`` may advance.

    Torch's global CPU generator, Python's and numpy's global generators, and the generators of
    ``loader``, its sampler and batch sampler (when ``loader`` is given).
    """
    import torch

    generators = []
    owners = (
        loader,
        getattr(loader, "sampler", None),
        getattr(loader, "batch_sampler", None),
        getattr(getattr(loader, "batch_sampler", None), "sampler", None),
    )
    for owner in owners:
        gen = getattr(owner, "generator", None)
        if isinstance(gen, torch.Generator) and all(gen is not g for g, _ in generators):
            generators.append((gen, gen.get_state()))
    torch_state = torch.get_rng_state()
    python_state = random.getstate()
    numpy_state = _numpy_state()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        if numpy_state is not None:
            import numpy

            numpy.random.set_state(numpy_state)
        for gen, state in generators:
            gen.set_state(state)


def _numpy_state() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy.random.get_state()


def sample_batch(loader: Any) -> Any:
    """The first batch of a single-process clone of ``loader`` (random state restored).

    Returns ``None`` when the loader yields nothing.
    """
    clone = clone_loader(loader, num_workers=0)
    with preserved_random_state(loader):
        return next(iter(clone), None)


def measure_loader(
    loader: Any,
    num_workers: int,
    batches: int,
    clock: Clock = time.perf_counter,
    *,
    budget_s: float | None = None,
) -> float:
    """Batches per second of a clone of ``loader`` with ``num_workers`` workers.

    See :func:`measure_loader_point` for what is timed.
    """
    return measure_loader_point(
        loader, num_workers, batches, clock, budget_s=budget_s
    ).batches_per_s


def measure_loader_point(
    loader: Any,
    num_workers: int,
    batches: int,
    clock: Clock = time.perf_counter,
    *,
    budget_s: float | None = None,
) -> SweepPoint:
    """Time ``batches`` batches of a clone of ``loader`` with ``num_workers`` workers.

    With workers, batches arrive in rounds (each worker finishes one at about the same time),
    so the rate is measured over whole rounds of ``num_workers`` batches, at least
    :data:`MIN_ROUNDS` of them, after a warm-up of the batches dispatched when the workers
    start (``num_workers * prefetch_factor``; 1 batch without workers), whose timing is set by
    startup. Startup is reported as ``first_batch_ms``. The clone's workers are shut down
    before returning, also on error. With ``budget_s``, timing stops at the first round
    boundary after that many counted seconds.

    Args:
        loader: the DataLoader to copy; it is not iterated itself.
        num_workers: worker processes of the clone.
        batches: counted batches (rounded up to whole rounds).
        clock: a monotonic clock in seconds (injectable for tests).
        budget_s: optional cap on the counted time.

    Returns:
        The measured point; ``batches_per_s`` is 0 when the loader yielded nothing.
    """
    clone = clone_loader(loader, num_workers=num_workers, persistent_workers=False)
    round_size = max(1, num_workers)
    warmup = max(1, num_workers * (clone.prefetch_factor or 1))
    target = max(batches, MIN_ROUNDS * round_size)
    target = -(-target // round_size) * round_size
    gaps_ms: list[float] = []
    first_batch_ms: float | None = None
    with preserved_random_state(loader):
        start = clock()
        it = _quiet_iter(clone)
        try:
            seen = 0
            last = start
            counted_start: float | None = None
            for _ in it:
                now = clock()
                seen += 1
                if seen == 1:
                    first_batch_ms = 1000.0 * (now - start)
                if seen > warmup:
                    gaps_ms.append(1000.0 * (now - last))
                if seen == warmup:
                    counted_start = now
                last = now
                if len(gaps_ms) >= target:
                    break
                if (
                    budget_s is not None
                    and counted_start is not None
                    and len(gaps_ms) >= max(2, round_size)
                    and len(gaps_ms) % round_size == 0
                    and now - counted_start >= budget_s
                ):
                    break
        finally:
            shutdown_workers(it)
            del it
    if gaps_ms:
        seconds = sum(gaps_ms) / 1000.0
        counted = len(gaps_ms)
    elif first_batch_ms is not None:
        # Shorter than the warm-up: count everything, startup included.
        seconds, counted = (last - start), seen
    else:
        return SweepPoint(num_workers, 0.0, batches=0)
    stat = Stat.of(gaps_ms)
    return SweepPoint(
        num_workers=num_workers,
        batches_per_s=counted / seconds if seconds > 0 else float("inf"),
        first_batch_ms=first_batch_ms,
        batch_ms_median=stat.median if stat else None,
        batch_ms_p90=stat.p90 if stat else None,
        batches=counted,
    )


@contextlib.contextmanager
def _no_worker_count_warning() -> Iterator[None]:
    """Silence DataLoader's warning for more workers than cores: a sweep tries that on purpose."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="This DataLoader will create", category=UserWarning
        )
        yield


def _quiet_iter(loader: Any) -> Any:
    """``iter(loader)`` without the warning for more workers than cores."""
    with _no_worker_count_warning():
        return iter(loader)


def sweep_loader(
    loader: Any,
    policy: SweepPolicy,
    batches_per_setting: int,
    clock: Clock = time.perf_counter,
    *,
    budget_s_per_setting: float | None = None,
    on_point: Callable[[SweepPoint], None] | None = None,
) -> WorkerSweep:
    """Measure clones of ``loader`` at the worker counts ``policy`` asks for, until it stops.

    Args:
        loader: the user's DataLoader (not iterated itself).
        policy: decides the settings and when to stop (see
            :func:`~torchdoctor.analysis.worker_sweep.sweep_candidates`).
        batches_per_setting: counted batches at each setting.
        clock: monotonic clock in seconds.
        budget_s_per_setting: optional cap on the counted time of each setting.
        on_point: called after each setting is measured (for progress output).

    Returns:
        The sweep with its curve and chosen setting (``measures="loader"``).
    """
    begin = clock()
    while (workers := policy.next()) is not None:
        point = measure_loader_point(
            loader, workers, batches_per_setting, clock, budget_s=budget_s_per_setting
        )
        policy.add(
            workers,
            point.batches_per_s,
            first_batch_ms=point.first_batch_ms,
            batch_ms_median=point.batch_ms_median,
            batch_ms_p90=point.batch_ms_p90,
            batches=point.batches,
        )
        if on_point is not None:
            on_point(point)
    return policy.result(measures="loader", seconds=clock() - begin)


__all__ = [
    "clone_loader",
    "loader_kwargs",
    "measure_loader",
    "measure_loader_point",
    "preserved_random_state",
    "sample_batch",
    "shutdown_workers",
    "sweep_loader",
]
