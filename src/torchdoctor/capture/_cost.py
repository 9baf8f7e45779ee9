"""What capture costs the script: the hooks time their own work, in a sample of the steps.

Reading the clock twice in every hook of every step is a cost of its own (a tenth of the hooks'
work), so the hooks time themselves in the first :data:`COST_FIRST_STEPS` steps of each phase
(where its one-off work falls) and after them in two steps of every :data:`COST_PERIOD`. The
second of the two is counted: the step end that opens it runs in the first one's last hook,
which was timed too. A counted step stands for itself and the steps since the last counted one.
The first step of a phase (or of ``run --whole``'s measured window, or of its watched steps) is
counted too, so that a window of one step has a figure: what it leaves out is the rest of the
hook that ended the step before, when that step was not timed (a few microseconds, once).

A hook whose step ends inside it (the optimizer's post-hook, the next batch's ``__next__``) may
see the flag change between its start and its end (``_own``, the script's work inside, reads it
later than the wrapper did): the time then lands in a step whose flag differs from the one
before, which is never counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from time import perf_counter_ns

COST_FIRST_STEPS = 4
COST_PERIOD = 8


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
            return hook(self, *args, **kwargs)
        started = perf_counter_ns()
        try:
            return hook(self, *args, **kwargs)
        finally:
            self._cost_ns += perf_counter_ns() - started

    return counted


class CostSample:
    """Which steps of a phase the hooks time themselves in, and what each counted one stands for."""

    def __init__(self) -> None:
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

    def next_timed(self) -> bool:
        """Whether the hooks time themselves in the next step."""
        return costs_step(self.steps + 1)
