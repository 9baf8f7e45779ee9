"""Choosing ``num_workers`` together with the main process's intra-op threads (a CPU model).

Pure: nothing here imports torch or measures anything. On a CPU model the DataLoader workers and
the main process's intra-op threads (``torch.get_num_threads()``, one per core by default) share
the cores: with busy workers, the model's threads wait for each other at every parallel region
(measured on 2 cores, one costly transform and a tiny model: 2 workers 1.13x the steps of 0
workers, 2 workers with ``torch.set_num_threads(1)`` 1.75x). So the whole-step sweep searches
``(num_workers, threads)`` pairs, cheaply, as a coordinate search:

1. **probe**: the model alone (one batch replayed, no loading) with the script's own threads and
   with 1: a few fast steps. When 1 thread keeps up (within the pick tolerance), the model gains
   nothing from its threads even with every core to itself, and workers only add contention:
   the threads are *idle*. (When 1 thread saves so much of the model's time that the script's
   own step would be clearly shorter, the path measures 0 workers on 1 thread too.)
2. **path**: the worker candidates of :func:`~torchdoctor.loader.sweep_candidates`, ascending,
   each on 1 thread (threads idle) or on the cores the workers leave
   (:func:`thread_candidates`, first), stopping on a plateau like the workers-only sweep
   (:class:`~torchdoctor.loader.SweepPolicy`). The script as it is (its ``num_workers`` with its
   own threads) is the baseline: the rate of the steps measured before the sweep, when given.
3. **check**: unless the threads are idle, the other thread counts at the path's pick, and the
   baseline if it was neither given nor measured;
4. **coordinate step**: when the check moved the threads, more workers at those threads, until a
   plateau.
5. **confirm**: the two fastest settings are measured again side by side, in ABBA order, and the
   pick is made between them from those measurements alone: one noisy trial (a burst of load
   during one setting, or a quiet moment during another) cannot choose it.

The exhaustive grid (every worker candidate with every thread count) costs a whole-step trial per
pair; with idle threads the search costs one per worker count and two short model-alone ones,
see benchmarks/worker_sweep.py for both on a tiny model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from ..record import DEFAULT_PICK_TOLERANCE, SweepPoint, WorkerSweep
from ._policy import PLATEAU_GAIN, SweepPolicy

#: One trial of the whole-step sweep: ``(num_workers, threads)``.
Setting = tuple[int, int]

#: The ``num_workers`` of a probe setting: the model alone, on a replayed batch.
MODEL_ALONE = -1

#: Settings in a row without gain before the path stops. The whole-step path runs in a loop
#: that shares the cores with everything else on the machine: on the shared 2-core development
#: machine, 2 workers measured no faster than 1 in 3 of 4 searches while the exhaustive grid
#: measured them 1.1-2x faster (benchmarks/worker_sweep.py), and the search saves more than the
#: extra setting costs.
PATH_PATIENCE = 2
#: The fastest settings re-measured side by side before the pick, and how (ABBA: drift in the
#: machine's load between the two cancels out).
CONFIRM_TOP = 2


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

    Used like :class:`~torchdoctor.loader.SweepPolicy`: ``next()`` gives a setting or ``None``
    (``num_workers`` :data:`MODEL_ALONE` for the probe), ``add(workers, threads, rate)`` records
    what it measured, ``result()`` is the sweep.

    Args:
        worker_candidates: the worker counts (:func:`~torchdoctor.loader.sweep_candidates`).
        cpu_count: logical CPUs.
        default_threads: the script's own ``torch.get_num_threads()``.
        current_workers: the script's own ``num_workers``.
        baseline_batches_per_s: the rate of the script as it is (its steps measured before the
            sweep), or ``None`` to measure it.
        tolerance: the pick's tolerance; also how close 1 thread must come in the probe.
    """

    def __init__(
        self,
        worker_candidates: Sequence[int],
        *,
        cpu_count: int,
        default_threads: int,
        current_workers: int,
        baseline_batches_per_s: float | None = None,
        tolerance: float = DEFAULT_PICK_TOLERANCE,
        plateau_gain: float = PLATEAU_GAIN,
        patience: int = PATH_PATIENCE,
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
        #: The model alone at the script's own threads and at 1 (``num_workers`` 0).
        self.probe: list[SweepPoint] = []
        if baseline_batches_per_s is not None:
            self.points.append(
                SweepPoint(current_workers, baseline_batches_per_s, threads=self.default_threads)
            )
        #: Whether the model keeps up on one thread alone (the probe), once known.
        self.threads_idle: bool | None = None if self.default_threads > 1 else False
        self._stage = "probe"
        self._queue: list[Setting] = []
        if self.threads_idle is None:
            self._queue = [(MODEL_ALONE, self.default_threads), (MODEL_ALONE, 1)]
        self._onward: SweepPolicy | None = None
        self._onward_threads = self.default_threads
        #: The confirm stage's settings and their side-by-side rates, in the order measured.
        self.confirmed: dict[Setting, list[float]] = {}
        self._confirm_queue: list[Setting] = []

    @property
    def confirming(self) -> bool:
        """In the confirm stage: the settings now asked for were measured before."""
        return self._stage == "confirm"

    @property
    def stopped(self) -> str | None:
        """Why the path along the workers stopped (``plateau``, ``exhausted``), once it has."""
        return self.path.stopped

    def path_threads(self, num_workers: int) -> int:
        """The thread count the path tries with ``num_workers``: 1 when the probe found the
        model's threads idle, else those the workers leave free (the script's own at 0)."""
        if self.threads_idle:
            return 1
        if num_workers == 0:
            return self.default_threads
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
                    known = self.rate(workers, self.path_threads(workers))
                    if known is None:
                        return workers, self.path_threads(workers)
                    self.path.add(workers, known)  # the baseline
                    continue
                self._stage = "check"
                self._queue = self._checks()
            elif self._stage == "check":
                self._stage = "onward"
                self._start_onward()
            elif self._stage == "onward" and self._onward is not None:
                workers = self._onward.next()
                if workers is None:
                    self._start_confirm()
                    continue
                known = self.rate(workers, self._onward_threads)
                if known is None:
                    return workers, self._onward_threads
                self._onward.add(workers, known)  # the baseline may sit on this line already
            elif self._stage == "onward":
                self._start_confirm()
            elif self._stage == "confirm" and self._confirm_queue:
                return self._confirm_queue.pop(0)
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
        if num_workers == MODEL_ALONE:
            self.probe.append(SweepPoint(0, batches_per_s, threads=threads, **measured))  # type: ignore[arg-type]
            return
        if self._stage == "confirm" and (num_workers, threads) in self.confirmed:
            self.confirmed[(num_workers, threads)].append(batches_per_s)
            return
        point = SweepPoint(num_workers, batches_per_s, threads=threads, **measured)  # type: ignore[arg-type]
        self.points.append(point)
        if self._stage == "path" and threads == self.path_threads(num_workers):
            self.path.add(num_workers, batches_per_s)
        elif self._stage == "onward" and self._onward is not None:
            self._onward.add(num_workers, batches_per_s)

    def rate(self, num_workers: int, threads: int) -> float | None:
        """The rate measured at a setting, if it was."""
        measured = self.probe if num_workers == MODEL_ALONE else self.points
        workers = 0 if num_workers == MODEL_ALONE else num_workers
        for p in measured:
            if (p.num_workers, p.threads) == (workers, threads):
                return p.batches_per_s
        return None

    def best(self, tolerance: float | None = None) -> Setting:
        """The chosen ``(num_workers, threads)`` (:func:`pick_setting`).

        Raises:
            ValueError: when nothing was measured.
        """
        if not self.points:
            raise ValueError("nothing measured yet")
        return pick_setting(self._pickable(), self.default_threads, _or(tolerance, self.tolerance))

    def _pickable(self) -> list[SweepPoint]:
        """The points the pick is made from: the confirmed settings at their side-by-side mean
        once each was measured again, else every point."""
        if not self.confirmed or not all(self.confirmed.values()):
            return self.points
        return [p for p in self._with_repeats() if p.repeats]

    def _with_repeats(self) -> list[SweepPoint]:
        """Every point, a confirmed one with its side-by-side rates and their mean as its rate."""
        out = []
        for p in self.points:
            repeats = self.confirmed.get((p.num_workers, _threads(p, self.default_threads)))
            if repeats:
                p = replace(p, batches_per_s=sum(repeats) / len(repeats), repeats=list(repeats),
                            first_batches_per_s=p.batches_per_s)  # fmt: skip
            out.append(p)
        return out

    def _start_confirm(self) -> None:
        """The fastest :data:`CONFIRM_TOP` settings, again, side by side (ABBA)."""
        self._stage = "confirm"
        ranked = sorted(self.points, key=lambda p: -p.batches_per_s)
        top: list[Setting] = []
        for p in ranked:
            setting = (p.num_workers, _threads(p, self.default_threads))
            if setting not in top:
                top.append(setting)
        top = top[:CONFIRM_TOP]
        if len(top) < 2:
            return
        self.confirmed = {setting: [] for setting in top}
        self._confirm_queue = [*top, *reversed(top)]

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
            points=sorted(self._with_repeats(), key=lambda p: (p.num_workers, -(p.threads or 0))),
            best_workers=workers,
            stopped=self.stopped or "incomplete",
            candidates=list(self.candidates),
            tolerance=tolerance,
            measures=measures,
            seconds=seconds,
            best_threads=threads,
            default_threads=self.default_threads,
            threads_probe=list(self.probe),
        )

    def _start_path(self) -> None:
        """After the probe: decide the path's threads. The baseline stands for 0 workers when it
        is the script's setting, unless the model alone ran so much faster on 1 thread that the
        baseline's step would be clearly shorter with it: then 0 workers is measured on 1
        thread."""
        self._stage = "path"
        alone = self.rate(MODEL_ALONE, self.default_threads) or 0.0
        single = self.rate(MODEL_ALONE, 1) or 0.0
        if self.threads_idle is None:
            self.threads_idle = alone > 0 and single >= alone * (1.0 - self.tolerance)
        baseline = self.rate(*self.current)
        if self.current[0] != 0 or baseline is None or baseline <= 0:
            return
        if self.threads_idle and alone > 0:
            # The baseline's step with the model's time on 1 thread instead of its own threads.
            step_ms = 1000.0 / baseline - 1000.0 / alone + 1000.0 / single
            if step_ms * (1.0 + self.tolerance) < 1000.0 / baseline:
                return  # clearly faster: 0 workers is measured on 1 thread
        self.path.add(0, baseline)

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


__all__ = [
    "CONFIRM_TOP",
    "MODEL_ALONE",
    "PATH_PATIENCE",
    "Setting",
    "WorkerThreadPolicy",
    "pick_setting",
    "thread_candidates",
]
