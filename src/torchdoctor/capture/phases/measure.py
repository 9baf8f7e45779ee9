"""The measured steps: each one's time split into data wait, copy, forward, backward, optimizer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...record import phase_names
from .base import Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks


class MeasurePhase(Phase):
    """``--steps`` timed steps, with the system sampler running alongside."""

    name = phase_names.MEASURE
    writes = ("measured", "system")
    measuring = True

    def total(self, session: PhaseSession) -> int:
        return session.options.steps

    def start(self, session: PhaseSession) -> None:
        if session.options.warmup > 0:
            session.hook_root_modules_only()
        session.sampler.start()
        session.progress(self.name, 0, self.total(session))

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        session.data.measured.append(step)
        return super().on_step(session, step)

    def finish(self, session: PhaseSession) -> None:
        session.data.system = session.sampler.stop()
