"""The measured steps: each one's time split into data wait, copy, forward, backward, optimizer."""

from __future__ import annotations

from ...record import phase_names
from .base import Phase


class MeasurePhase(Phase):
    """``--steps`` timed steps, with the system sampler running alongside."""

    name = phase_names.MEASURE
    measuring = True

    def total(self, session) -> int:
        return session.options.steps

    def start(self, session) -> None:
        if session.options.warmup > 0:
            session.hook_root_modules_only()
        session.sampler.start()
        session.progress(self.name, 0, self.total(session))

    def on_step(self, session, step) -> bool:
        session.data.measured.append(step)
        return super().on_step(session, step)

    def finish(self, session) -> None:
        session.data.system = session.sampler.stop()
