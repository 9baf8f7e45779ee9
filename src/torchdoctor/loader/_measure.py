"""Timing a DataLoader without the model: one worker count, a sweep over several, the loader alone.

Every measurement iterates a clone (:func:`~torchdoctor.loader.clone_loader`) and skips and
counts batches by the rules of :mod:`._rules`. :func:`sweep_loader` is the sweep for a model on
an accelerator, where workers do not compete with the model for the CPU (on the CPU the capture
sweeps whole training steps instead, with the same :class:`~torchdoctor.loader.SweepPolicy`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..record import LoaderAlone, Stat, SweepPoint, WorkerSweep
from ._clone import clone_loader, preserved_random_state, quiet_iter, shutdown_workers
from ._policy import SweepPolicy
from ._rules import counted_batches, warm_batches

Clock = Callable[[], float]


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
    so the rate is measured over whole rounds of ``num_workers`` batches
    (:func:`~torchdoctor.loader.counted_batches`), after a warm-up of the batches dispatched
    when the workers start (:func:`~torchdoctor.loader.warm_batches`), whose timing is set by
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
    warmup = warm_batches(num_workers, clone.prefetch_factor)
    target = counted_batches(num_workers, batches)
    gaps_ms: list[float] = []
    first_batch_ms: float | None = None
    with preserved_random_state(loader):
        start = clock()
        it = quiet_iter(clone)
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
            :func:`~torchdoctor.loader.sweep_candidates`).
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


def measure_loader_alone(loader: Any, batches: int) -> LoaderAlone:
    """Iterate a clone of ``loader`` (same workers) without the model, over whole rounds.

    Worker start-up is timed apart (``first_batch_ms``), and the batches prefetched when the
    workers start are not counted: they arrive at once (see :func:`measure_loader_point`).
    """
    point = measure_loader_point(loader, loader.num_workers, batches)
    rate = point.batches_per_s
    return LoaderAlone(
        batches=point.batches,
        seconds=round(point.batches / rate, 4) if rate > 0 else 0.0,
        batches_per_s=round(rate, 3),
        needed_batches_per_s=None,
        first_batch_ms=round(point.first_batch_ms, 3) if point.first_batch_ms else None,
    )


__all__ = [
    "Clock",
    "measure_loader",
    "measure_loader_alone",
    "measure_loader_point",
    "sweep_loader",
]
