"""Choosing ``num_workers`` by measurement: the candidate list, the sweep's stop rule, the pick.

Pure: nothing here imports torch or measures anything. The measuring side
(:func:`~torchdoctor.loader.sweep_loader`, or the capture's whole-step sweep) feeds measured
throughputs to a :class:`SweepPolicy` one setting at a time::

    policy = SweepPolicy(sweep_candidates(cpu_count, current))
    while (workers := policy.next()) is not None:
        policy.add(workers, measure(workers))
    sweep = policy.result()
    findings = sweep_advice(sweep, settings, accelerator=True, batches_per_epoch=len(loader))

A sweep works the same whether the throughput is of the loader alone (the model runs on an
accelerator, so workers do not compete with it) or of whole training steps (the model runs on
the CPU, so they do): the caller decides what ``batches_per_s`` means.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence

from ..record import DEFAULT_PICK_TOLERANCE, SweepPoint, WorkerSweep

#: Candidates stop at this many workers per logical CPU. Workers that wait on I/O (disk,
#: network, a sleep) can usefully outnumber cores; for CPU-bound work, going past twice the cores
#: only adds contention and ``prefetch_factor`` batches of memory per worker.
WORKERS_PER_CPU_BOUND = 2

#: Never sweep past this many workers, whatever the CPU count: each worker holds a copy of what
#: it touches of the dataset and ``prefetch_factor`` batches, and starting one costs time.
MAX_SWEEP_WORKERS = 32

#: A setting must beat the best earlier one by this fraction, or the sweep stops (a plateau).
#: Doubling the workers for less than 10% is not worth their memory, and run-to-run noise on a
#: shared machine is of the order of 5%.
PLATEAU_GAIN = 0.10

#: How many settings in a row may miss :data:`PLATEAU_GAIN` before the sweep stops.
PLATEAU_PATIENCE = 1

#: Once a setting delivers this multiple of the rate the model consumes, more workers cannot
#: shorten the step (the model is the bound); the headroom absorbs jitter in batch times.
TARGET_HEADROOM = 1.2


def max_sweep_workers(cpu_count: int) -> int:
    """The largest ``num_workers`` a sweep tries on a machine with ``cpu_count`` logical CPUs.

    ``min(WORKERS_PER_CPU_BOUND * cpu_count, MAX_SWEEP_WORKERS)``, and at least 1.
    """
    return max(1, min(WORKERS_PER_CPU_BOUND * max(1, cpu_count), MAX_SWEEP_WORKERS))


def sweep_candidates(cpu_count: int, current: int) -> list[int]:
    """The ``num_workers`` values to try, in the order to try them.

    0, 1, 2, 4, 8, ... doubling up to :func:`max_sweep_workers` (the bound itself is included
    when it is not a power of two), plus the user's ``current`` setting so it is measured on the
    same footing, all ascending.

    Args:
        cpu_count: logical CPUs available to the process.
        current: the DataLoader's ``num_workers`` now.

    Returns:
        Distinct worker counts, ascending.
    """
    bound = max_sweep_workers(cpu_count)
    values = {0, bound}
    n = 1
    while n < bound:
        values.add(n)
        n *= 2
    if current >= 0:
        values.add(current)
    return sorted(values)


class SweepPolicy:
    """Decides which ``num_workers`` to measure next and when to stop.

    Settings are tried in the order of ``candidates``. The sweep stops early when

    - a setting with 2 or more workers fails to beat every earlier setting by
      :data:`PLATEAU_GAIN` (``patience`` times in a row): a plateau, or a decline;
    - a setting reaches ``target_batches_per_s * TARGET_HEADROOM``: the model, not the loader,
      bounds the step from there on.

    The step from 0 to 1 worker is never a plateau: one worker only overlaps loading with the
    consumer, the gain comes from the second.
    """

    def __init__(
        self,
        candidates: Sequence[int],
        *,
        target_batches_per_s: float | None = None,
        plateau_gain: float = PLATEAU_GAIN,
        patience: int = PLATEAU_PATIENCE,
    ) -> None:
        if not candidates:
            raise ValueError("a sweep needs at least one candidate")
        self.candidates = sorted(set(candidates))
        self.target_batches_per_s = target_batches_per_s
        self.plateau_gain = plateau_gain
        self.patience = patience
        self.points: list[SweepPoint] = []
        self.stopped: str | None = None
        self._misses = 0

    def next(self) -> int | None:
        """The next ``num_workers`` to measure, or ``None`` when the sweep is over."""
        if self.stopped is not None:
            return None
        done = {p.num_workers for p in self.points}
        for n in self.candidates:
            if n not in done:
                return n
        self.stopped = "exhausted"
        return None

    def add(self, num_workers: int, batches_per_s: float, **measured: float | int | None) -> None:
        """Record the throughput measured at ``num_workers`` (extra fields go to the point)."""
        if not math.isfinite(batches_per_s) or batches_per_s < 0:
            raise ValueError(
                f"batches_per_s must be a finite non-negative number, got {batches_per_s}"
            )
        earlier_best = max((p.batches_per_s for p in self.points), default=None)
        self.points.append(SweepPoint(num_workers, batches_per_s, **measured))  # type: ignore[arg-type]
        target = self.target_batches_per_s
        if target is not None and batches_per_s >= target * TARGET_HEADROOM:
            self.stopped = "target"
            return
        if num_workers < 2 or earlier_best is None:
            return
        if batches_per_s < earlier_best * (1.0 + self.plateau_gain):
            self._misses += 1
            if self._misses >= self.patience:
                self.stopped = "plateau"
        else:
            self._misses = 0

    @property
    def curve(self) -> list[tuple[int, float]]:
        """``(num_workers, batches_per_s)`` of every measured setting, by worker count."""
        return sorted((p.num_workers, p.batches_per_s) for p in self.points)

    def best(self, tolerance: float = DEFAULT_PICK_TOLERANCE) -> int:
        """The fewest workers whose throughput is within ``tolerance`` of the best measured.

        With a target rate, "the best" is capped at ``target * TARGET_HEADROOM``: beyond what
        the model consumes, more throughput buys nothing.

        Raises:
            ValueError: when nothing was measured.
        """
        if not self.points:
            raise ValueError("nothing measured yet")
        return pick_workers(self.points, tolerance, self.target_batches_per_s)

    def result(
        self,
        tolerance: float = DEFAULT_PICK_TOLERANCE,
        *,
        measures: str = "loader",
        seconds: float | None = None,
    ) -> WorkerSweep:
        """The sweep so far as a :class:`WorkerSweep`."""
        return WorkerSweep(
            points=sorted(self.points, key=lambda p: p.num_workers),
            best_workers=self.best(tolerance),
            stopped=self.stopped or "incomplete",
            candidates=list(self.candidates),
            tolerance=tolerance,
            target_batches_per_s=self.target_batches_per_s,
            measures=measures,
            seconds=seconds,
        )


def pick_workers(
    points: Iterable[SweepPoint],
    tolerance: float = DEFAULT_PICK_TOLERANCE,
    target_batches_per_s: float | None = None,
) -> int:
    """The fewest workers within ``tolerance`` of the best (capped) throughput of ``points``."""
    ordered = sorted(points, key=lambda p: p.num_workers)
    enough = max(p.batches_per_s for p in ordered)
    if target_batches_per_s is not None:
        enough = min(enough, target_batches_per_s * TARGET_HEADROOM)
    for p in ordered:
        if p.batches_per_s >= enough * (1.0 - tolerance):
            return p.num_workers
    return ordered[-1].num_workers  # unreachable: the best point always qualifies


def available_cpus() -> int:
    """Logical CPUs this process may run on (its affinity mask, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


__all__ = [
    "DEFAULT_PICK_TOLERANCE",
    "MAX_SWEEP_WORKERS",
    "PLATEAU_GAIN",
    "PLATEAU_PATIENCE",
    "TARGET_HEADROOM",
    "WORKERS_PER_CPU_BOUND",
    "SweepPolicy",
    "available_cpus",
    "max_sweep_workers",
    "pick_workers",
    "sweep_candidates",
]
