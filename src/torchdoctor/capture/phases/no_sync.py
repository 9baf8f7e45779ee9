"""Communication made free: the same steps under DDP's ``no_sync()``, gradients not all-reduced.

Each DDP module the script calls gets ``require_backward_grad_sync = False`` (what ``no_sync()``
sets) for ``--steps`` steps: no bucket is all-reduced in backward and, from the second step, no
buffer is broadcast in forward. What is left is each rank's own work: its data, forward,
backward and optimizer. The ranks no longer wait for each other, so this is also how the
straggler is told from the ranks that wait for it. The gradients each rank applies are its own,
so the replicas drift apart: the script is stopped after the capture, as always, and these steps
come after every phase whose figures depend on the training itself.
"""

from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel

from ...record import phase_names
from .base import Phase


class NoSyncPhase(Phase):
    name = phase_names.NO_SYNC

    def __init__(self) -> None:
        super().__init__()
        self._patcher = None

    def wanted(self, session) -> bool:
        if not session.options.counterfactuals or not session.ranks.launched:
            return False
        if not _ddp_modules(session):
            note = (
                "communication-free phase skipped: the script calls no DistributedDataParallel "
                "module (communication is told apart only under DDP)"
            )
            if note not in session.data.notes:
                session.data.notes.append(note)
            return False
        return True

    def total(self, session) -> int:
        return session.options.steps

    def start(self, session) -> None:
        self._patcher = session.patcher.child()
        for module in _ddp_modules(session):
            self._patcher.set(module, "require_backward_grad_sync", False)
        session.progress(self.name, 0, self.total(session))

    def on_step(self, session, step) -> bool:
        session.data.no_sync.append(step)
        return super().on_step(session, step)

    def close(self, session) -> None:
        patcher, self._patcher = self._patcher, None
        if patcher is not None:
            patcher.restore()


def _ddp_modules(session) -> list[DistributedDataParallel]:
    return [m for m in session.root_modules() if isinstance(m, DistributedDataParallel)]
