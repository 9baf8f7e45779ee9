"""Choosing ``num_workers`` together with the main process's intra-op threads (a CPU model).

Pure: nothing here imports torch or measures anything. On a CPU model the DataLoader workers and
the main process's intra-op threads (``torch.get_num_threads()``, one per core by default) share
the cores: with busy workers, the model's threads wait for each other at every parallel region
(measured on 2 cores, one costly transform and a tiny model: 2 workers 1.13x the steps of 0
workers, 2 workers with ``torch.set_num_threads(1)`` 1.75x). So the whole-step sweep searches
``(num_workers, threads)`` pairs, cheaply, as a coordinate search:

1. **probe**: no workers, with the script's own threads and with 1. When 1 thread keeps up
   (within the pick tolerance), the model gains nothing from its threads even with every core
   to itself, and workers only add contention: the path runs on 1 thread and needs no check.
2. **path**: the worker counts of :func:`~torchdoctor.loader.sweep_candidates`, ascending, each
   with 1 thread (threads idle) or the threads the workers leave free (:func:`thread_candidates`,
   first), stopping on a plateau like the workers-only sweep
   (:class:`~torchdoctor.loader.SweepPolicy`);
3. **check**: unless the threads are idle, the other thread counts at the path's pick; and the
   script as it is (its ``num_workers`` with its own threads), the baseline of the speedup;
4. **coordinate step**: when the check moved the threads, more workers at those threads, until a
   plateau.

The exhaustive grid (every worker candidate with every thread count) costs most where the
search does not go: many workers with every core's thread, the slowest steps. On 2 cores with a
tiny model the search measures 5 of the 8 pairs of the grid in under half its time, see
benchmarks/worker_sweep.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ..record import DEFAULT_PICK_TOLERANCE, SweepPoint, WorkerSweep
from ._policy import PLATEAU_GAIN, PLATEAU_PATIENCE, SweepPolicy

#: One trial of the whole-step sweep: ``(num_workers, threads)``.
Setting = tuple[int, int]


def thread_candidates(cpu_count: int, default_threads: int, num_workers: int) -> list[int]:
    """Main-process thread counts worth trying next to ``num_workers`` workers, first the path's.

    The cores the workers leave (``cpu_count - num_workers``, at least 1, at most the script's
    own count), the script's own count, and 1; distinct, in that order.
    """
    left = max(1, min(default_threads, cpu_count - num_workers))
    return list(dict.fromkeys([left, max(1, default_threads), 1]))


def pick_setting(
    points: Iterable[SweepPoint], default_threads: int, tolerance: float = DEFAULT_PICK_TOLERANCE
) -> Setting:
    """The fewest workers within ``tolerance`` of the best rate; among those, the script's own
    thread count if it qualifies (no change to advise), else the most threads."""
    measured = list(points)
    enough = max(p.batches_per_s for p in measured) * (1.0 - tolerance)
    good = [p for p in measured if p.batches_per_s >= enough]

    def preference(p: SweepPoint) -> tuple[int, bool, int]:
        threads = _threads(p, default_threads)
        return p.num_workers, threads != default_threads, -threads

    best = min(good, key=preference)
    return best.num_workers, _threads(best, default_threads)


class WorkerThreadPolicy:
    """Decides which ``(num_workers, threads)`` to measure next and when to stop (see the module).

    Used like :class:`~torchdoctor.loader.SweepPolicy`: ``next()`` gives a setting or ``None``,
    ``add(workers, threads, rate)`` records what it measured, ``result()`` is the sweep.
    """

    def __init__(
        self,
        worker_candidates: Sequence[int],
        *,
        cpu_count: int,
        default_threads: int,
        current_workers: int,
        tolerance: float = DEFAULT_PICK_TOLERANCE,
        plateau_gain: float = PLATEAU_GAIN,
        patience: int = PLATEAU_PATIENCE,
    ) -> None:
        self.cpu_count = max(1, cpu_count)
        self.default_threads = max(1, default_threads)
        self.current: Setting = (current_workers, self.default_threads)
        self.tolerance = tolerance
        self.plateau_gain = plateau_gain
        self.patience = patience
        self.path = SweepPolicy(worker_candidates, plateau_gain=plateau_gain, patience=patience)
        self.candidates = self.path.candidates
        self.points: list[SweepPoint] = []
        #: Whether the model keeps up on one thread without workers (the probe), once known.
        self.threads_idle: bool | None = None if self.default_threads > 1 else False
        self._stage = "probe"
        self._queue: list[Setting] = [(0, self.default_threads), (0, 1)]
        self._onward: SweepPolicy | None = None
        self._onward_threads = self.default_threads

    @property
    def stopped(self) -> str | None:
        """Why the path along the workers stopped (``plateau``, ``exhausted``), once it has."""
        return self.path.stopped

    def path_threads(self, num_workers: int) -> int:
        """The thread count the path tries with ``num_workers``: 1 when the probe found the
        model's threads idle, else those the workers leave free (the script's own at 0)."""
        if num_workers == 0:
            return self.default_threads
        if self.threads_idle:
            return 1
        return thread_candidates(self.cpu_count, self.default_threads, num_workers)[0]

    def next(self) -> Setting | None:
        """The next ``(num_workers, threads)`` to measure, or ``None`` when the search is over."""
        while True:
            while self._queue:
                setting = self._queue.pop(0)
                if self.rate(*setting) is None:
                    return setting
            if self._stage == "probe":
                self._start_path()
            elif self._stage == "path":
                workers = self.path.next()
                if workers is not None:
                    return workers, self.path_threads(workers)
                self._stage = "check"
                self._queue = self._checks()
            elif self._stage == "check":
                self._stage = "onward"
                self._start_onward()
            elif self._stage == "onward" and self._onward is not None:
                workers = self._onward.next()
                if workers is None:
                    self._stage = "done"
                    continue
                known = self.rate(workers, self._onward_threads)
                if known is None:
                    return workers, self._onward_threads
                self._onward.add(workers, known)  # the baseline may sit on this line already
            else:
                self._stage = "done"
                return None

    def add(
        self, num_workers: int, threads: int, batches_per_s: float, **measured: float | int | None
    ) -> None:
        """Record the throughput measured at ``(num_workers, threads)`` (extras go to the point)."""
        if not math.isfinite(batches_per_s) or batches_per_s < 0:
            raise ValueError(
                f"batches_per_s must be a finite non-negative number, got {batches_per_s}"
            )
        point = SweepPoint(num_workers, batches_per_s, threads=threads, **measured)  # type: ignore[arg-type]
        self.points.append(point)
        if self._stage == "path" and threads == self.path_threads(num_workers):
            self.path.add(num_workers, batches_per_s)
        elif self._stage == "onward" and self._onward is not None:
            self._onward.add(num_workers, batches_per_s)

    def rate(self, num_workers: int, threads: int) -> float | None:
        """The rate measured at a setting, if it was."""
        for p in self.points:
            if (p.num_workers, p.threads) == (num_workers, threads):
                return p.batches_per_s
        return None

    def best(self, tolerance: float | None = None) -> Setting:
        """The chosen ``(num_workers, threads)`` (:func:`pick_setting`).

        Raises:
            ValueError: when nothing was measured.
        """
        if not self.points:
            raise ValueError("nothing measured yet")
        return pick_setting(self.points, self.default_threads, _or(tolerance, self.tolerance))

    def result(
        self,
        tolerance: float | None = None,
        *,
        measures: str = "step",
        seconds: float | None = None,
    ) -> WorkerSweep:
        """The search so far as a :class:`~torchdoctor.record.WorkerSweep`."""
        tolerance = _or(tolerance, self.tolerance)
        workers, threads = self.best(tolerance)
        return WorkerSweep(
            points=sorted(self.points, key=lambda p: (p.num_workers, -(p.threads or 0))),
            best_workers=workers,
            stopped=self.stopped or "incomplete",
            candidates=list(self.candidates),
            tolerance=tolerance,
            measures=measures,
            seconds=seconds,
            best_threads=threads,
            default_threads=self.default_threads,
        )

    def _start_path(self) -> None:
        """After the probe: the path starts from 0 workers, at the threads it chose."""
        self._stage = "path"
        alone, single = self.rate(0, self.default_threads), self.rate(0, 1)
        if self.threads_idle is None and alone is not None and single is not None:
            self.threads_idle = single >= alone * (1.0 - self.tolerance)
        start = single if self.threads_idle else alone
        if start is not None:
            self.path.add(0, start)

    def _checks(self) -> list[Setting]:
        """After the path: the other thread counts at its pick (unless the probe found the
        threads idle: workers only add contention), and the script as it is (the baseline)."""
        chosen = self.path.best()
        checks = []
        if not self.threads_idle:
            others = thread_candidates(self.cpu_count, self.default_threads, chosen)
            checks = [(chosen, t) for t in others]
        return [*checks, self.current]

    def _start_onward(self) -> None:
        """After the check: when the best threads at the path's pick are not the path's, go on
        with more workers at those threads (the path stopped at threads it no longer uses)."""
        chosen = self.path.best()
        at_chosen = [p for p in self.points if p.num_workers == chosen]
        best = max(at_chosen, key=lambda p: p.batches_per_s)
        if best.threads is None or best.threads == self.path_threads(chosen):
            return
        more = [n for n in self.candidates if n > chosen]
        if not more:
            return
        self._onward = SweepPolicy(
            [chosen, *more], plateau_gain=self.plateau_gain, patience=self.patience
        )
        self._onward_threads = best.threads
        self._onward.add(chosen, best.batches_per_s)


def _threads(point: SweepPoint, default_threads: int) -> int:
    return point.threads if point.threads is not None else default_threads


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


__all__ = ["Setting", "WorkerThreadPolicy", "pick_setting", "thread_candidates"]
