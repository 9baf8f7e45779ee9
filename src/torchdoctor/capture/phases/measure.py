"""The measured steps: each one's time split into data wait, copy, forward, backward, optimizer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...record import phase_names
from .._memory_course import MemoryCourseReader
from .base import Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks


class MeasurePhase(Phase):
    """``--steps`` timed steps, with the system sampler running alongside, and the memory in use
    read at their start, middle and end (between steps: no step carries a reading)."""

    name = phase_names.MEASURE
    writes = ("measured", "system", "memory_course")
    measuring = True

    def __init__(self) -> None:
        super().__init__()
        self._memory: MemoryCourseReader | None = None

    def total(self, session: PhaseSession) -> int:
        return session.options.steps

    def start(self, session: PhaseSession) -> None:
        if session.options.warmup > 0:
            session.hook_root_modules_only()
        session.sampler.start()
        self._memory = MemoryCourseReader(session.clock.device)
        self._memory.read(0)
        session.progress(self.name, 0, self.total(session))

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        session.data.measured.append(step)
        done = super().on_step(session, step)
        if self._memory is not None and self.steps_done == (self.total(session) + 1) // 2:
            self._memory.read(self.steps_done)
        return done

    def finish(self, session: PhaseSession) -> None:
        session.data.system = session.sampler.stop()
        self.close(session)

    def close(self, session: PhaseSession) -> None:
        """The last reading, also when the script ended during the steps."""
        memory, self._memory = self._memory, None
        if memory is not None:
            memory.read(self.steps_done)
            session.data.memory_course = memory.course()
