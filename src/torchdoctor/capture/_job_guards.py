"""What keeps torchdoctor from hanging a distributed job or reaching its files
(docs/distributed.md, "Uneven inputs under Join" and "Checkpoints").

- **Join.** torchdoctor's gloo group is made right after the script's ``init_process_group``
  (every rank is at that call), and ``torch.distributed.algorithms.Join.__exit__`` is wrapped:
  a rank whose data ran out tells :class:`~torchdoctor.capture._ranks.Ranks` before it enters
  Join's loop (its answer to the other ranks' next agreement goes out then), and when Join lets
  every rank go, a job whose ranks ran out at different steps is stopped there, on every rank at
  once: the only place where no rank waits in Join for another.
- **Saves of drifted replicas.** While the replicas drift apart (the communication-free phase:
  each rank applies its own gradients), a call that would write a checkpoint — ``torch.save`` to
  a file, ``torch.distributed.checkpoint``'s ``save``/``async_save``/``save_state_dict`` — stops
  the job before it writes anything; the other ranks stop at their next agreement.

Installed in a launched rank only, through the Patcher (undone on every ending).
"""

from __future__ import annotations

import functools
import io
import os
import sys
from typing import TYPE_CHECKING, Any

from ..record import SEEN_IN_JOIN
from ._frames import user_site
from ._step_hooks import StopRun

if TYPE_CHECKING:
    from ._session import CaptureSession

#: ``torch.distributed.checkpoint``'s functions that write a checkpoint (each rank calls them).
DCP_SAVES = ("save", "async_save", "save_state_dict")


def guard_job(session: CaptureSession) -> None:
    """Make torchdoctor's group as the script makes its own; wrap Join's exit and the checkpoint
    writers, for this launched rank."""
    patcher = session.patcher
    try:
        import torch.distributed.distributed_c10d as c10d
        from torch.distributed.algorithms.join import Join
    except ImportError:  # a torch built without distributed
        return
    import torch.distributed as dist

    init = _then_group(patcher.original(c10d.init_process_group), session)
    for owner in (dist, c10d):
        patcher.set(owner, "init_process_group", init)
    patcher.set(Join, "__exit__", _join_exit(patcher.original(Join.__exit__), session))
    import torch

    # around what torch.save is now (a whole run's timing wrapper stays outermost)
    patcher.set(torch, "save", _guarded(torch.save, session, "torch.save"))
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        return
    for name in DCP_SAVES:
        original = getattr(dcp, name, None)
        if original is not None:
            wrapped = _guarded(
                patcher.original(original), session, f"torch.distributed.checkpoint.{name}"
            )
            patcher.set(dcp, name, wrapped)


def _then_group(original: Any, session: CaptureSession) -> Any:
    """``init_process_group`` that then makes torchdoctor's own group: every rank is at the same
    call now, and a rank whose data runs out under Join later must find the group made (making
    it is a collective the ranks still in their loop would never join)."""

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        session.ranks.group()
        return result

    return init_process_group


def _join_exit(original: Any, session: CaptureSession) -> Any:
    @functools.wraps(original)
    def __exit__(join: Any, exc_type: Any, exc: Any, tb: Any) -> Any:
        ranks = session.ranks
        ran_out = exc_type is None and bool(getattr(join, "_enable", True))
        seen = session.data.seen
        if ran_out:
            seen[SEEN_IN_JOIN] = int(seen.get("optimizer_steps", 0))  # told by the heartbeat
            ranks.joined(seen[SEEN_IN_JOIN])
        result = original(join, exc_type, exc, tb)
        seen.pop(SEEN_IN_JOIN, None)
        stops = session.options.stop and not session.options.whole  # a whole run goes on
        if ran_out and ranks.after_join() and stops:
            session.data.notes.append(join_note(ranks.first_join_step, ranks.joined_at))
            raise StopRun()
        return result

    return __exit__


def join_note(first: int | None, own: int | None) -> str:
    """What a rank of a job with uneven inputs under Join says of its stop."""
    mine = "this rank's" if own is not None and own == first else "a rank's"
    return (
        f"stopped where Join let every rank go: {mine} data ran out under Join at step {first} "
        "(uneven inputs); no phase started after it, and the job was not stopped earlier, since "
        "a rank waiting in Join's loop would wait for ever for a rank stopped elsewhere"
    )


def _guarded(original: Any, session: CaptureSession, name: str) -> Any:
    # not named "save": a whole run's wrapper counts the functions named so as the checkpoint's
    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        ranks = session.ranks
        if ranks.drifting and (name != "torch.save" or _to_a_file(args, kwargs)):
            site = user_site(sys._getframe(1))
            where = f" at {site.file}:{site.line}" if site is not None else ""
            session.data.notes.append(
                f"stopped before the script's {name}{where}: in the communication-free phase "
                "each rank applies its own gradients and the replicas drift apart, so nothing "
                "was saved (the phase keeps the steps it measured)"
            )
            ranks.stop_now()
        return original(*args, **kwargs)

    return guarded


def _to_a_file(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``torch.save(obj, f)`` that writes a file (a path, or a file opened on one), not a
    buffer in memory."""
    f = args[1] if len(args) > 1 else kwargs.get("f")
    if isinstance(f, (str, bytes, os.PathLike)):
        return True
    if isinstance(f, (io.BytesIO, io.StringIO)):
        return False
    return isinstance(getattr(f, "name", None), (str, bytes, os.PathLike))
