"""The ranks of a distributed job agree through torch.distributed itself (docs/distributed.md).

Every rank runs the same phase table and counts the same steps (DDP steps them in lockstep), so
the phases change at the same step everywhere. What could still differ is a phase's decision to
run (one rank's batches do not fit in memory, one rank's verdict so far): before each phase
that takes steps, the ranks agree on it with one all-reduce on a gloo group of torchdoctor's own,
made beside the script's the first time it is needed (all ranks are then at the same step). At
the end, every rank's record is gathered on rank 0 over the same group. The coordination runs
between two steps, outside every timed part.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import torch

from .._errors import lost_peer
from ..record import RankEnv
from ._step_hooks import StopRun

#: ``torch.distributed`` has no group to coordinate on (never initialised, or one process).
_NO_GROUP: Any = object()


class Ranks:
    """This process's place in a job launched by torchrun, and the job's own gloo group."""

    def __init__(self, timeout_s: float, env: RankEnv | None = None) -> None:
        #: Where this process stands, as torchrun's environment says (a test passes its own).
        self.env = env if env is not None else RankEnv.detect()
        self.world_size = self.env.world_size
        self.rank = self.env.rank
        self.local_rank = self.env.local_rank
        self._timeout_s = timeout_s
        self._group: Any = None
        #: The script's process group's backend, once seen initialised: kept for the record
        #: whatever happens after (a script that destroys its group, a rank that fails).
        self.backend = ""
        #: The first line of the error of torchdoctor's collective that lost a peer rank (the
        #: rank then stops, following the one that left).
        self.peer_lost = ""

    @property
    def launched(self) -> bool:
        """Launched as one rank of several (torchrun's environment says so)."""
        return self.world_size > 1

    def group(self) -> Any:
        """torchdoctor's gloo group over every rank, made on first use (a collective call)."""
        if self._group is None:
            dist = _dist()
            if dist is None or not dist.is_initialized():
                return None  # not yet: the script has not initialised its process group
            self._group = _NO_GROUP
            self.backend = str(dist.get_backend())
            if dist.get_world_size() > 1:
                self._group = dist.new_group(
                    backend="gloo", timeout=_dt.timedelta(seconds=self._timeout_s)
                )
        return None if self._group is _NO_GROUP else self._group

    @property
    def coordinated(self) -> bool:
        return self.launched and self.group() is not None

    def agree(self, wanted: bool) -> bool:
        """True only when every rank wants it (one all-reduce); alone, ``wanted`` itself."""
        group = self.group() if self.launched else None
        if group is None:
            return wanted
        dist = _dist()
        flag = torch.tensor([1 if wanted else 0], dtype=torch.int32)
        try:
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
        except Exception as exc:  # noqa: BLE001 - another rank left: this one stops as well
            if not lost_peer(str(exc)):
                raise
            self.peer_lost = str(exc).strip().splitlines()[0][:300]
            raise StopRun() from exc
        return bool(flag.item())

    def gather(self, payload: Any) -> list[Any] | None:
        """Every rank's ``payload`` on rank 0 (``None`` elsewhere, or with no group)."""
        group = self._group if self._group not in (None, _NO_GROUP) else None
        if group is None:
            return None
        dist = _dist()
        out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(payload, out, dst=0, group=group)
        return out

    def close(self) -> None:
        """Destroy torchdoctor's group (the script's own groups are the script's)."""
        group, self._group = self._group, None
        if group in (None, _NO_GROUP):
            return
        dist = _dist()
        try:
            if dist is not None and dist.is_initialized():
                dist.destroy_process_group(group)
        except (RuntimeError, ValueError):  # the script destroyed every group already
            pass


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() else None
