"""The ranks of a distributed job agree through torch.distributed itself (docs/distributed.md).

Every rank runs the same phase table and counts the same steps (DDP steps them in lockstep), so
the phases change at the same step everywhere. What could still differ is a phase's decision to
run (one rank's batches do not fit in memory, one rank's verdict so far): before each phase
that takes steps, the ranks agree on it with one all-reduce on a gloo group of torchdoctor's own,
made beside the script's the first time it is needed (all ranks are then at the same step). At
the end, every rank's record is gathered on rank 0 over the same group. The coordination runs
between two steps, outside every timed part.

Two things break the lockstep, and each agreement carries them (one all-reduce of a few
integers, each reduced with MIN):

- **A rank whose data ran out under** ``torch.distributed.algorithms.Join``: it waits in Join's
  loop, shadowing the others' collectives, and takes no step, so it would never join an
  agreement. As it enters that loop (:meth:`Ranks.joined`) it posts its answer *asynchronously*:
  the next agreement of the ranks that go on completes with it. From then on no rank starts a
  phase or calls torchdoctor's group again until the gather, and no rank stops the script inside
  Join (the rank in its loop would wait for ever): the job is stopped where Join lets every rank
  go (:meth:`Ranks.after_join`). Ranks that run out at the same step are even inputs: nothing
  changes.
- **A rank that must stop now** (it was about to save a checkpoint of drifted replicas,
  ``capture._job_guards``): its vote makes every rank stop at its next agreement.
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
#: A join step no rank has taken (MIN over the ranks leaves it only where none joined).
_NEVER = 2**62
#: An agreement's vote, each element reduced with MIN: [wanted, not joined, joined, first join
#: step, minus the last join step, not stopping].
_WANTED, _NOT_JOINED, _JOINED, _FIRST, _LAST, _GOING_ON = range(6)


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
        #: The optimizer step at which this rank's data ran out under Join, where the job's
        #: inputs were uneven (the ranks ran out at different steps); else None.
        self.joined_at: int | None = None
        #: A rank's data ran out under Join before another's: no phase starts any more, and
        #: the job stops where Join lets every rank go.
        self.uneven_join = False
        #: The first step at which a rank's data ran out under Join, where the inputs were uneven.
        self.first_join_step: int | None = None
        #: Another rank voted to stop the job (it was about to save drifted replicas).
        self.peer_stopped = False
        #: The replicas drift apart now (the communication-free phase): no checkpoint may be
        #: written (``capture._job_guards``).
        self.drifting = False
        self._join_step: int | None = None
        self._answer: Any = None  # (work, vote) of the asynchronous answer of a rank that joined

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
        """True only when every rank wants it (one all-reduce); alone, ``wanted`` itself.
        False, without a collective, once a rank's data ran out under Join before another's.

        Raises:
            StopRun: another rank left the job, or voted to stop it.
        """
        group = self.group() if self.launched else None
        if group is None:
            return wanted
        if self.uneven_join:
            return False
        vote = self._vote(wanted=wanted)
        self._all_reduce(vote, group)
        self._read(vote)
        if not int(vote[_GOING_ON]):
            self.peer_stopped = True
            raise StopRun()
        return bool(vote[_WANTED]) and not self.uneven_join

    def may_stop(self) -> bool:
        """Whether the script may be stopped now its phases are done: not in a job where a rank
        waits in Join's loop (it would wait for ever; ``capture._job_guards`` stops the job where
        Join lets every rank go). Every rank of a job asks at the same step."""
        if self.launched:
            self.agree(True)
        return not self.uneven_join

    def why_not_agreed(self) -> str:
        """Why a phase this rank wanted did not run."""
        if self.uneven_join:
            return (
                "a rank's data ran out under Join (uneven inputs), and a rank waiting in Join "
                "takes no step"
            )
        return "another rank of the job could not run it, and every rank must take the same steps"

    def stop_now(self) -> None:
        """This rank must stop (a save of drifted replicas): every rank stops at its next
        agreement; this one at once.

        Raises:
            StopRun: always.
        """
        group = self.group() if self.launched else None
        if group is not None and not self.uneven_join:
            vote = self._vote(wanted=False)
            vote[_GOING_ON] = 0
            self._all_reduce(vote, group)
        raise StopRun()

    def joined(self, step: int) -> None:
        """This rank's data ran out inside Join (at optimizer step ``step``): it answers the
        other ranks' next agreement now, without waiting for it."""
        self._join_step = step
        # the group is never made here: making it is a collective the other ranks are not in
        group = self._group if self._group is not _NO_GROUP else None
        if group is None or self.uneven_join or self._answer is not None:
            return
        vote = self._vote(wanted=False)
        self._answer = (_dist().all_reduce(vote, op=_dist().ReduceOp.MIN, group=group,
                                           async_op=True), vote)  # fmt: skip

    @property
    def ran_out_at(self) -> int | None:
        """The step at which this rank's data ran out under Join, where the job's inputs were
        uneven or where the rank still waits in Join's loop (the job was stopped there: the
        other ranks were still stepping, or its loop would have ended)."""
        return self.joined_at if self.joined_at is not None else self._join_step

    def after_join(self) -> bool:
        """Join let every rank go: whether the job's inputs were uneven (a rank ran out first),
        after which it is stopped here, on every rank at once. Even inputs change nothing."""
        answer, self._answer = self._answer, None
        if answer is not None:
            work, vote = answer
            work.wait()
            self._read(vote)
        step, self._join_step = self._join_step, None
        if self.uneven_join and self.joined_at is None:
            self.joined_at = step
        return self.uneven_join

    def _vote(self, wanted: bool) -> torch.Tensor:
        step = self._join_step
        joined = step is not None
        return torch.tensor(
            [int(wanted), int(not joined), int(joined), step if joined else _NEVER,
             -step if joined else _NEVER, 1],
            dtype=torch.int64,
        )  # fmt: skip

    def _read(self, vote: torch.Tensor) -> None:
        """What an agreement said of the ranks that joined."""
        some, every = not int(vote[_NOT_JOINED]), bool(int(vote[_JOINED]))
        first, last = int(vote[_FIRST]), -int(vote[_LAST])
        if some and (not every or first != last):
            self.uneven_join = True
            self.first_join_step = first
            if self._join_step is not None:
                self.joined_at = self._join_step

    def _all_reduce(self, vote: torch.Tensor, group: Any) -> None:
        dist = _dist()
        try:
            dist.all_reduce(vote, op=dist.ReduceOp.MIN, group=group)
        except Exception as exc:  # noqa: BLE001 - another rank left: this one stops as well
            if not lost_peer(str(exc)):
                raise
            self.peer_lost = str(exc).strip().splitlines()[0][:300]
            raise StopRun() from exc

    def gather(self, payload: Any) -> list[Any] | None:
        """Every rank's ``payload`` on rank 0 (``None`` elsewhere, or with no group)."""
        group = self._group if self._group not in (None, _NO_GROUP) else None
        if group is None:
            return None
        dist = _dist()
        self._settle_answer()
        out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(payload, out, dst=0, group=group)
        return out

    def close(self) -> None:
        """Destroy torchdoctor's group (the script's own groups are the script's)."""
        if self._answer is not None and not self._answer[0].is_completed():
            return  # a joined rank's answer nobody took (the job ended otherwise): left to exit
        group, self._group = self._group, None
        if group in (None, _NO_GROUP):
            return
        dist = _dist()
        try:
            if dist is not None and dist.is_initialized():
                dist.destroy_process_group(group)
        except (RuntimeError, ValueError):  # the script destroyed every group already
            pass

    def _settle_answer(self) -> None:
        answer, self._answer = self._answer, None
        if answer is not None:
            answer[0].wait()


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() else None
