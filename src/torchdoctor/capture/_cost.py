"""What capture costs the script: the hooks time their own work, in a sample of the steps.

The clock is the training thread's CPU time (:data:`cost_clock_ns`, ``time.thread_time_ns``),
not the wall clock: the hooks' work is the thread's work, and a busy machine that keeps the
thread waiting for a core moves the wall clock, not this one (on this 2-core machine beside
three busy processes, a loop of 46 ms of CPU took 90 ms of wall time). The script's own work
inside a hook (``_own``) is taken out on the same clock. Work the script does on other threads
(DataLoader workers, torch's intra-op pool) is never counted; ours never runs there.

Reading the clock twice in every hook of every step is a cost of its own (a tenth of the hooks'
work), so the hooks time themselves in the first :data:`COST_FIRST_STEPS` steps of each phase
(where its one-off work falls) and after them in two steps of every :data:`COST_PERIOD` (16:
with 8, the thread clock's reads added 7 us a step on the bare benchmark step, with 16 about 2). The
second of the two is counted: the step end that opens it runs in the first one's last hook,
which was timed too. A counted step stands for itself and the steps since the last counted one;
the reads of the clock that timed it lie in it alone (each pair that times a stretch holds one
read's worth), so they count once, not for every step it stands for (:func:`read_cost_ns`).
The first step of a phase (or of ``run --whole``'s measured window, or of its watched steps) is
counted too, so that a window of one step has a figure.

A hook whose step ends inside it (the optimizer's post-hook, the next batch's ``__next__``, a
loop's batch function) may see the flag change between its start and its end. A hook that
started timed counts itself whole, into the step that starts in it; one that started untimed
counts the rest of itself from the moment the flag turned on (``_timed_from``), and ``_own``,
the script's work inside, reads the flag as it is when that work starts. Either way the work the
step end does between two phases is taken out (``_step_ended``), and a step's figure holds only
torchdoctor's work. Not handled: a step that ends inside a hook which itself runs inside another
hook's ``_own`` (a DataLoader drawn from inside a loop's batch function, in a loop without an
optimizer), whose first step may count the inner work as capture's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from time import thread_time_ns

#: The clock the hooks' cost is read on: the calling thread's CPU time in ns (a read costs about
#: 0.5 us here, against 0.06 us for the wall clock; only the sampled steps read it).
cost_clock_ns = thread_time_ns

COST_FIRST_STEPS = 4
COST_PERIOD = 16


def read_cost_ns(reads: int = 201) -> int:
    """What one read of :data:`cost_clock_ns` costs, on that clock: the median gap between
    consecutive reads (a read preempted half-way does not move it).

    Each pair of reads that times a stretch holds one read's worth of the clock itself (the
    first read's end, the second's start): a timed step pays it once per pair (about 14 pairs,
    0.86 us a read here, in a step of the MLP benchmark), and the steps it stands for never do.
    So the step's figure counts its reads once, not once per step it stands for
    (:meth:`CostSample.counted_ns`)."""
    clock = cost_clock_ns
    times = [clock() for _ in range(reads)]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    return gaps[len(gaps) // 2]


def costs_step(index: int) -> bool:
    """Whether the hooks time themselves in a phase's ``index``-th step (from 1)."""
    return index <= COST_FIRST_STEPS or index % COST_PERIOD in (0, COST_PERIOD - 1)


def costed(hook: Callable) -> Callable:
    """Count the time a hook of the session takes into its ``_cost_ns``, in the steps its
    ``_costing`` says are timed.

    A hook that runs the script's own work inside (the DataLoader's ``__next__``, a copy, a
    backward) takes that work's time back out (``StepHooks._own``).
    """

    @functools.wraps(hook)
    def counted(self, *args, **kwargs):
        if not self._costing:
            try:
                return hook(self, *args, **kwargs)
            finally:
                if self._costing:  # the step ended in it and the next is timed: the rest counts
                    self._cost_ns += cost_clock_ns() - self._timed_from
                    self._cost_reads += 1
        started = cost_clock_ns()
        try:
            return hook(self, *args, **kwargs)
        finally:
            self._cost_ns += cost_clock_ns() - started
            self._cost_reads += 1

    return counted


class CostSample:
    """Which steps of a phase the hooks time themselves in, and what each counted one stands for."""

    def __init__(self) -> None:
        #: One read of the clock, on it (:func:`read_cost_ns`).
        self.read_ns = read_cost_ns()
        #: Steps ended in the current phase, and the last of them whose cost was counted.
        self.steps = self._counted = 0
        self._timed_before = False

    def phase_started(self) -> None:
        """A phase (or a window of one) starts: its steps are numbered from 1 again, and its
        first step is counted."""
        self.steps = self._counted = 0
        self._timed_before = True

    def step_ended(self, timed: bool) -> int:
        """A step ended, its hooks timed or not: how many steps its cost stands for (0: its cost
        is not counted, for it was not timed from the previous step's end on)."""
        self.steps += 1
        weight = 0
        if timed and self._timed_before:
            weight, self._counted = self.steps - self._counted, self.steps
        self._timed_before = timed
        return weight

    def counted_ns(self, cost_ns: int, pairs: int, weight: int) -> int:
        """What a counted step's hooks cost (``cost_ns``, timed by ``pairs`` pairs of reads of
        the clock, each holding :attr:`read_ns`) in the ``weight`` steps it stands for: its
        work in each, its reads once."""
        reads = min(pairs * self.read_ns, max(cost_ns, 0))
        return (cost_ns - reads) * weight + reads

    def next_timed(self) -> bool:
        """Whether the hooks time themselves in the next step."""
        return costs_step(self.steps + 1)
