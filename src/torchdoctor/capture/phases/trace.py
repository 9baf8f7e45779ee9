"""``--trace DIR``: a torch.profiler trace of a few untimed steps, torchdoctor's parts labelled."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...record import phase_names
from ..profiler import StepProfiler
from .base import Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks

#: One warm-up step (the profiler's start-up lands there), then the recorded ones.
TRACE_WARMUP_STEPS = 1
TRACE_ACTIVE_STEPS = 3


class TracePhase(Phase):
    name = phase_names.TRACE
    writes = ("trace_paths",)

    def __init__(self) -> None:
        super().__init__()
        self._profiler: StepProfiler | None = None

    def wanted(self, session: PhaseSession) -> bool:
        return bool(session.options.trace_dir)

    def total(self, session: PhaseSession) -> int:
        return TRACE_WARMUP_STEPS + TRACE_ACTIVE_STEPS

    def start(self, session: PhaseSession) -> None:
        session.progress(self.name, 0, self.total(session))
        profiler = StepProfiler(
            session.options.trace_dir, wait=0, warmup=TRACE_WARMUP_STEPS, active=TRACE_ACTIVE_STEPS
        )
        profiler.start()
        self._profiler = session.profiler = profiler

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        if self._profiler is not None:
            self._profiler.step()
        return super().on_step(session, step)

    def finish(self, session: PhaseSession) -> None:
        self.close(session)

    def close(self, session: PhaseSession) -> None:
        profiler, self._profiler = self._profiler, None
        session.close_labels()
        session.profiler = None
        if profiler is None:
            return
        profiler.stop()
        session.data.trace_paths = [str(p) for p in profiler.trace_paths]
