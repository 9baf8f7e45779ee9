"""How a launched job ended (``--nproc-per-node``): the launcher's stop, the rank that ended it,
a rank of another node, or ranks that ran out on their own (docs/distributed.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ...record import (
    COMPLETE,
    INTERNAL_ERROR,
    INTERRUPTED,
    KILLED,
    NO_TRAINING,
    OUT_OF_MEMORY,
    PARTIAL,
    SCRIPT_ERROR,
    TIMED_OUT,
    Ending,
    Status,
)
from ._exit import exit_status
from ._stop import signal_name


@dataclass(frozen=True)
class JobEnd:
    """The evidence of a job's end: torchdoctor's stop, and how its ranks ended
    (``process.rank_endings``)."""

    timed_out: bool = False
    signalled: int | None = None
    max_seconds: float | None = None
    #: The status the rank that ended the job gave itself (None: no rank ended it).
    cause_status: Status | None = None
    #: That rank's ending in words (``rank 1 raised ValueError at step 4``).
    cause_words: str = ""
    #: A rank lost a peer in its collectives that is not among this node's ranks.
    follower_without_cause: bool = False
    #: Uneven inputs: ranks ran out of batches while another rank still had some.
    uneven: bool = False
    #: The worst of the ranks' own statuses (``STATUS_PRECEDENCE``).
    ranks_status: Status = COMPLETE


def decide_job(end: JobEnd, measured: bool) -> Ending:
    """How the job ended (``measured``: the job measured a step). Precedence: torchdoctor's
    stop (the bound, then a signal), then the rank that ended the job (its own status when it
    was killed or torchdoctor failed in it, else the script's error), then a rank of another
    node, then ranks that ran out on their own, else the job completed."""
    notes: list[str] = []
    if end.cause_words:  # the failure leads, whatever stopped the job after it
        notes.append(f"{end.cause_words}; the launcher then ended the other ranks")
    words = notes[0] if notes else ""  # uneven inputs: their finding's words (the launcher's)
    if end.timed_out:
        status: Status = TIMED_OUT
        notes.insert(0, f"stopped at the --max-seconds bound ({end.max_seconds or 0:g} s)")
        cause = "bound"
    elif end.signalled is not None:
        status = INTERRUPTED
        notes.insert(0, f"stopped by torchdoctor on {signal_name(end.signalled)}")
        cause = "signal"
    elif end.cause_status is not None:
        own = (KILLED, INTERNAL_ERROR, OUT_OF_MEMORY)  # the rest is the script's error
        status = end.cause_status if end.cause_status in own else SCRIPT_ERROR
        cause = "rank-ended"
    elif end.follower_without_cause and not end.uneven:
        status = SCRIPT_ERROR
        notes.insert(0, "the ranks' collectives lost a peer that is not among this node's "
                        "ranks: a rank of another node ended the job")  # fmt: skip
        cause = "other-node"
    elif end.ranks_status != COMPLETE:
        status = PARTIAL if measured else NO_TRAINING  # the data ran out
        cause = "script-end"
    else:
        status, cause = COMPLETE, "measured"
    return Ending(status, exit_status(status, measured), cause, notes, words)  # type: ignore[arg-type]


def decide_launcher(
    timed_out: bool, signalled: int | None, returncode: int | None, max_seconds: float | None
) -> Ending:
    """How a job ended whose launcher started no rank."""
    if timed_out:
        status: Status = TIMED_OUT
        note = (
            f"no rank started within the --max-seconds bound ({max_seconds or 0:g} s): the "
            "rendezvous waited for nodes that did not join"
        )
        cause = "bound"
    elif signalled is not None:
        status, note, cause = INTERRUPTED, "interrupted before any rank started", "signal"
    else:
        status, cause = SCRIPT_ERROR, "launcher"
        note = (
            f"the launcher (torch.distributed.run) ended with status {returncode} before any "
            "rank started; its messages are above"
        )
    return Ending(status, exit_status(status, False), cause, [note])  # type: ignore[arg-type]
