"""The sync finder's steps: watched for host-device syncs and per-step copies, not timed."""

from __future__ import annotations

from ...record import phase_names
from ..syncs import SyncWatcher
from .base import Phase


class SyncSamplePhase(Phase):
    """``--sync-steps`` steps under a :class:`SyncWatcher` (its function mode slows them)."""

    name = phase_names.SYNC_SAMPLE

    def __init__(self) -> None:
        super().__init__()
        self._watcher: SyncWatcher | None = None

    def wanted(self, session) -> bool:
        return session.options.sync_steps > 0

    def total(self, session) -> int:
        return session.options.sync_steps

    def start(self, session) -> None:
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

    def on_step(self, session, step) -> bool:
        session.data.sync_sample_ms.append(session.step_ms(step, device_events=False))
        done = super().on_step(session, step)
        if not done and self._watcher is not None:
            self._watcher.mark_step()
        return done

    def finish(self, session) -> None:
        self.close(session)

    def close(self, session) -> None:
        watcher, self._watcher = self._watcher, None
        session.sync_watcher = None
        if watcher is None:
            return

        def keep(findings) -> None:
            session.data.sync_findings = findings

        # Told again at the next forward when the last step prefetched the next batch.
        watcher.stop(then=keep)
