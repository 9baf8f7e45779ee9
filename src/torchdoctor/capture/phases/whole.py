"""``run --whole``: the script runs to its own end, watched passively (docs/whole-run.md).

The one phase of a whole run. It never ends the script: no step is replayed, no setting changed,
nothing tried. Its first ``--warmup`` steps find the model (then only its outermost modules
carry hooks, as in a measured run) and the next ``--steps`` are measured part by part, as
``run`` measures them, for the verdict; every step's end, and what happened between two of them,
goes to the session's :class:`~torchdoctor.capture._whole.WholeRunWatch`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ...record import phase_names
from .._whole import WholeRunWatch
from .base import PhaseSession
from .measure import MeasurePhase

if TYPE_CHECKING:
    from .._data import StepMarks


def watch_whole_run(session: PhaseSession) -> WholeRunWatch:
    """The accountant of a whole run, its stack sampler started (stopped with the patches)."""
    timeline = session.timeline

    def part_now() -> str | None:  # read by the sampler's thread
        try:
            return timeline.current if timeline.depth else None
        except IndexError:  # the part ended as it was read
            return None

    options = session.options
    watch = WholeRunWatch(
        session.clock_ns, threading.get_ident(), part_now, options.sample_interval_s
    )
    watch.sampler.start()
    session.patcher.on_restore(watch.sampler.stop)
    return watch


class WholeRunPhase(MeasurePhase):
    """Every step of the run; during the window after warmup, the measure phase's steps."""

    name = phase_names.WHOLE

    def __init__(self) -> None:
        super().__init__()
        self.measuring = False  # an instance's: true during the measured window only

    def total(self, session: PhaseSession) -> int:
        return 0

    def start(self, session: PhaseSession) -> None:
        self._window(session)

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        self.steps_done += 1
        if self.measuring:
            session.data.measured.append(step)
        self._window(session)
        session.progress(self.name, self.steps_done, 0)
        return False

    def _window(self, session: PhaseSession) -> None:
        opts = session.options
        start, end = opts.warmup, opts.warmup + opts.steps
        if self.steps_done == start and not self.measuring:
            self.measuring = True
            super().start(session)  # the measured steps' hooks and the system sampler
            session.restart_cost_sample()
        elif self.steps_done == end and self.measuring:
            self.measuring = False
            super().finish(session)  # (the table never ends this phase: the window's end does)
            session.watch_only()
