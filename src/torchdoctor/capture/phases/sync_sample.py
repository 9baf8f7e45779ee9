"""The sync finder's steps: watched for host-device syncs and per-step copies, not timed. The
first of them also counts the step's memory by kind (:class:`~.._memory_split.MemoryWatch`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...record import phase_names
from .._kept_graphs import KeptGraphs
from .._memory_split import MemoryWatch
from ..syncs import SyncWatcher
from .base import Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks


class SyncSamplePhase(Phase):
    """``--sync-steps`` steps under a :class:`SyncWatcher` (its function mode slows them)."""

    name = phase_names.SYNC_SAMPLE
    writes = ("sync_sample_ms", "sync_findings", "memory_split", "memory_findings")

    def __init__(self) -> None:
        super().__init__()
        self._watcher: SyncWatcher | None = None
        self._memory: MemoryWatch | None = None
        self._kept: KeptGraphs | None = None

    def wanted(self, session: PhaseSession) -> bool:
        return session.options.sync_steps > 0

    def total(self, session: PhaseSession) -> int:
        return session.options.sync_steps

    def start(self, session: PhaseSession) -> None:
        session.progress(self.name, 0, self.total(session))
        watcher = SyncWatcher(
            on_accelerator=session.clock.on_accelerator,
            is_batch_tensor=session.is_batch_tensor,
            patcher=session.patcher.child(),
        )
        watcher.start()
        self._watcher = session.sync_watcher = watcher
        # What reaches the model's forward is its input: the copy of it is not a finding, and
        # a batch that arrives unmoved makes syncs on it count (CPU rule).
        watcher.hook_model_inputs(session.root_modules())
        self._memory = MemoryWatch(session.root_modules(), session.clock.device)
        self._memory.start()
        self._kept = KeptGraphs()

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        session.data.sync_sample_ms.append(session.step_ms(step, device_events=False))
        memory, self._memory = self._memory, None
        if memory is not None:  # the first watched step
            session.data.memory_split = memory.stop(session.optimizers.known())
        if self._kept is not None:  # graphs a variable keeps from one step's end to the next
            self._kept.look()
        done = super().on_step(session, step)
        if not done and self._watcher is not None:
            self._watcher.mark_step()
        return done

    def finish(self, session: PhaseSession) -> None:
        self.close(session)

    def close(self, session: PhaseSession) -> None:
        kept, self._kept = self._kept, None
        if kept is not None:
            session.data.memory_findings = kept.findings()
        memory, self._memory = self._memory, None
        if memory is not None:
            memory.close()
        watcher, self._watcher = self._watcher, None
        session.sync_watcher = None
        if watcher is None:
            return

        def keep(findings) -> None:
            session.data.sync_findings = findings

        # Told again at the next forward when the last step prefetched the next batch.
        watcher.stop(then=keep)
