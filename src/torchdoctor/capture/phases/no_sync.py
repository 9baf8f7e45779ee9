"""Communication made free: the same steps under DDP's ``no_sync()``, gradients not all-reduced,
and the script's own blocking collectives returning at once (``capture._collectives``); beside
DDP, a blocking collective whose output the script reads (an all-gather of the loss, to log it)
runs for real and its time is taken out of its step.

Each DDP module the script calls gets ``require_backward_grad_sync = False`` (what ``no_sync()``
sets) for ``--steps`` steps: no bucket is all-reduced in backward and, from the second step, no
buffer is broadcast in forward. What is left is each rank's own work: its data, forward,
backward and optimizer. The ranks no longer wait for each other, so this is also how the
straggler is told from the ranks that wait for it. The gradients each rank applies are its own,
so the replicas drift apart: the script is stopped after the capture, as always, and these steps
come after every phase whose figures depend on the training itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch.nn.parallel import DistributedDataParallel

from ...record import phase_names
from .base import Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks


class NoSyncPhase(Phase):
    name = phase_names.NO_SYNC
    writes = ("no_sync", "no_sync_collectives_ms")

    def __init__(self) -> None:
        super().__init__()
        self._patcher = None

    def wanted(self, session: PhaseSession) -> bool:
        if not session.options.counterfactuals or not session.ranks.launched:
            return False
        collectives = session.parallel.collectives
        if collectives.calls and not collectives.freeable:
            names = ", ".join(sorted(collectives.not_freeable))
            blocking = not any("async_op" in n for n in collectives.not_freeable)
            if _ddp_modules(session) and blocking:
                # DDP's all-reduce is made free; the script's blocking calls run for real, and
                # their time is taken out of each step
                _note(
                    session,
                    f"communication-free phase: the script's own {names} cannot return at once "
                    "(the script reads the output): each call ran for real, and its time is "
                    "taken out of its no-sync step",
                )
                return True
            return _skipped(
                session,
                f"communication-free phase skipped: the script calls {names} itself, whose "
                "output it reads (only blocking all_reduce, reduce, broadcast and barrier can "
                "return at once, and, beside DDP, blocking calls of other kinds run for real)",
            )
        if not _ddp_modules(session) and not collectives.calls:
            return _skipped(
                session,
                "communication-free phase skipped: the script calls no DistributedDataParallel "
                "module and no collective of its own (FSDP2's collectives are timed where the "
                "step waits for them instead)",
            )
        return True

    def total(self, session: PhaseSession) -> int:
        return session.options.steps

    def start(self, session: PhaseSession) -> None:
        self._patcher = session.patcher.child()
        for module in _ddp_modules(session):
            self._patcher.set(module, "require_backward_grad_sync", False)
        session.parallel.collectives.free = True  # the script's own collectives return at once
        session.ranks.drifting = True  # no checkpoint of the drifting replicas (_job_guards)
        session.progress(self.name, 0, self.total(session))

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        session.data.no_sync.append(step)
        session.data.no_sync_collectives_ms.append(session.parallel.collectives.last_step_ms)
        return super().on_step(session, step)

    def close(self, session: PhaseSession) -> None:
        patcher, self._patcher = self._patcher, None
        session.parallel.collectives.free = False
        session.ranks.drifting = False
        if patcher is not None:
            patcher.restore()


def _skipped(session: PhaseSession, note: str) -> bool:
    _note(session, note)
    return False


def _note(session: PhaseSession, note: str) -> None:
    """Once: ``wanted`` is asked again at each agreement."""
    if note not in session.data.notes:
        session.data.notes.append(note)


def _ddp_modules(session: PhaseSession) -> list[DistributedDataParallel]:
    return [m for m in session.root_modules() if isinstance(m, DistributedDataParallel)]
