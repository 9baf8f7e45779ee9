"""How each rank of a launched job ended, and what ended the job (docs/distributed.md).

Read from what each rank streamed (its last word, the heartbeat's counts, when its stream closed)
and from the launcher's exit code for each rank it saw fail. One table of endings, one wording
each, whatever caused it:

=========  ======================================================  =============
ending     what happened                                           the job's
=========  ======================================================  =============
complete   the rank took every step torchdoctor asked for           —
ran-out    its script ended on its own first (its data ran out)     no blame
raised     its script raised its own error                         cause
exited     its script called ``sys.exit(n)``, n other than 0       cause
killed     its process ended without a last word (a signal, the     cause
           OOM killer, ``os._exit``, a crash in native code)
follower   its collectives lost a rank that had ended (the error   consequence
           says so), or the launcher ended it after the cause
stopped    torchdoctor stopped the job (its bound, Ctrl-C,          no blame
           SIGTERM)
=========  ======================================================  =============

Ranks that ran out of data at different steps while another rank still had batches are
**uneven inputs**: the job is partial, with no rank to blame but a finding that says why.

A job torchdoctor stopped whose every rank had stopped stepping long before **stalled**
(:func:`stalled`): the rank that was not waiting in a collective then stopped first (its stack:
:mod:`.stacks`).

This module does not import torch.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

from .._errors import lost_peer
from ..record import (
    COMPLETE,
    INTERNAL_ERROR,
    INTERRUPTED,
    KILLED,
    OUT_OF_MEMORY,
    SCRIPT_ERROR,
    TIMED_OUT,
    Finding,
    RunRecord,
    split_where,
)
from . import stacks
from .stream import StreamState

#: Each ending's kind: a cause ends the job; the others follow or end on their own. A rank's
#: ``complete`` and ``killed`` are the words of the statuses of the same names.
CAUSES = ("raised", "exited", KILLED)


@dataclass
class RankEnd:
    """One rank's ending."""

    rank: int
    ending: str
    #: ``time.monotonic()`` of its last word, else of its stream's close (None: unknown).
    at: float | None
    #: Optimizer steps the rank took (its last word's, else its last heartbeat's).
    steps: int
    #: The status its own record gives (``complete``, ``partial``, ``script-error``...).
    status: str = ""
    #: Its own traceback (a rank that raised), else empty.
    error: list[str] = field(default_factory=list)
    #: The launcher's exit code for its process (negative: the signal), where it said one.
    exitcode: int | None = None
    #: Samples its main DataLoader holds (uneven inputs), where known.
    samples: int | None = None
    #: Its own ending's words when it ran out of memory (which memory, its line, the size).
    out_of_memory: str = ""

    @property
    def exception(self) -> str:
        """The name of the exception a rank raised (``RuntimeError``), from its traceback."""
        last = self.error[-1].strip() if self.error else ""
        return last.split(":", 1)[0] if last else "an error"


def rank_ends(
    states: list[StreamState], exitcodes: dict[int, int], stopped: str | None
) -> list[RankEnd]:
    """Every rank that said hello, with its ending (``stopped``: torchdoctor ended the job)."""
    ends = [_rank_end(s, exitcodes, stopped) for s in states if s.hello is not None]
    cause = first_cause(ends)
    for end in ends:
        if cause is not None and end is not cause and end.ending == KILLED:
            # ended by the launcher after the cause (it ends every other rank): a consequence,
            # unless a signal of its own (a native crash) ended it before the cause.
            before = end.at is not None and cause.at is not None and end.at < cause.at
            if not (before and _own_signal(end.exitcode)):
                end.ending = "follower"
    return sorted(ends, key=lambda e: e.rank)


def _rank_end(state: StreamState, exitcodes: dict[int, int], stopped: str | None) -> RankEnd:
    rank = state.hello.rank if state.hello is not None else 0
    exitcode = exitcodes.get(rank)
    final = state.final
    if final is None:
        # its last snapshot's count and the steps it logged since, or its last heartbeat's
        snapped = (state.snapshot or {}).get("seen") or {}
        steps = max(int((state.seen or {}).get("optimizer_steps", 0)),
                    int(snapped.get("optimizer_steps", 0)) + len(state.steps))  # fmt: skip
        ending = "stopped" if stopped is not None else KILLED
        return RankEnd(rank, ending, state.closed_at, steps, KILLED, exitcode=exitcode)
    record = final.record or {}
    status = str(record.get("status", ""))
    steps = int((record.get("seen") or {}).get("optimizer_steps", 0))
    lines = list(final.traceback)
    cause = (record.get("ending") or {}).get("cause")
    samples = (record.get("loader") or {}).get("dataset_len")
    end = RankEnd(rank, COMPLETE, state.final_at, steps, status, exitcode=exitcode,
                  samples=samples if isinstance(samples, int) else None)  # fmt: skip
    if status == COMPLETE:
        return end
    # its own collective lost a peer, or torchdoctor's did (its ending says so)
    if lost_peer("".join(lines)) or cause == "peer-lost":
        end.ending = "follower"
    elif (
        status in (TIMED_OUT, INTERRUPTED)
        or cause == "uneven-join"
        or (stopped is not None and not lines)
    ):
        end.ending = "stopped"
    elif status in (SCRIPT_ERROR, OUT_OF_MEMORY) and lines:
        end.ending, end.error = "raised", lines
        if status == OUT_OF_MEMORY:
            end.out_of_memory = str((record.get("ending") or {}).get("words") or "")
    elif status == SCRIPT_ERROR:
        end.ending = "exited"
    elif status == INTERNAL_ERROR:
        end.ending = "raised"  # torchdoctor's own failure in that rank: the report says so
    else:
        end.ending = "ran-out"  # partial or no-training: the script ended on its own
    return end


def first_cause(ends: list[RankEnd]) -> RankEnd | None:
    """The rank that ended the job: the earliest that raised, exited or was killed. A rank's
    stream may close late after it died (its DataLoader workers hold the socket until they
    notice), so a killed rank counts from when its stream closed, which is never too early."""
    causes = [e for e in ends if e.ending in CAUSES and e.at is not None]
    return min(causes, key=lambda e: e.at or 0.0) if causes else None


def uneven(ends: list[RankEnd]) -> list[RankEnd]:
    """The ranks that ran out of data while another rank of the job still had batches (it went
    on and lost them in a collective, or took more steps): empty when the inputs were even."""
    ran_out = [e for e in ends if e.ending == "ran-out"]
    if not ran_out or first_cause(ends) is not None:
        return []
    most = max(e.steps for e in ends)
    went_on = any(e.ending == "follower" for e in ends) or any(e.steps < most for e in ran_out)
    return ran_out if went_on else []


def words(end: RankEnd, stopped_words: str = "") -> str:
    """How the rank ended, in the report's words (empty for a rank that completed);
    ``stopped_words`` say how torchdoctor stopped the job (``on SIGTERM (signal 15)``)."""
    at = f"at step {end.steps}"
    if end.ending == COMPLETE:
        return ""
    if end.ending == "ran-out":
        return f"its script ended on its own after {end.steps} steps (its data ran out)"
    if end.ending == "raised":
        if end.status == INTERNAL_ERROR:
            return f"hit a failure of torchdoctor's own {at}"
        if end.status == OUT_OF_MEMORY:
            said = end.out_of_memory.removeprefix("the script ")
            return f"{said} {at}" if said else f"ran out of memory {at}"
        return f"raised {end.exception} {at}"
    if end.ending == "exited":
        return f"exited (sys.exit) with an error status {at}"
    if end.ending == KILLED:
        return f"{killed_words(end.exitcode)} {at}"
    if end.ending == "stopped":
        return f"stopped by torchdoctor {stopped_words} {at}".replace("  ", " ")
    return f"ended when another rank did {at} (its collectives lost their peer)"


def killed_words(exitcode: int | None) -> str:
    """A process that ended without torchdoctor's last word, named as exactly as known."""
    if exitcode is not None and exitcode < 0:
        return f"was killed by {signal_words(-exitcode)}"
    if exitcode is not None and exitcode > 0:
        return (
            f"exited with status {exitcode} without torchdoctor's last word (os._exit, or a "
            "crash in native code)"
        )
    return (
        "ended without torchdoctor's last word (a signal such as SIGKILL or the OOM killer, "
        "os._exit, or a crash in native code)"
    )


def signal_words(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    why = _SIGNAL_WHY.get(name)
    return f"{name} (signal {signum}{', ' + why if why else ''})"


_SIGNAL_WHY = {
    "SIGABRT": "an abort in native code, e.g. a collective that failed its checks",
    "SIGSEGV": "a crash in native code",
    "SIGBUS": "a crash in native code",
    "SIGKILL": "the OOM killer, or kill -9",
    "SIGTERM": "asked to stop",
}


def _own_signal(exitcode: int | None) -> bool:
    """A signal a process raises itself (a crash), not one the launcher sends to end it."""
    return (
        exitcode is not None and exitcode < 0 and -exitcode not in (signal.SIGTERM, signal.SIGINT)
    )


def describe(ends: list[RankEnd], stopped_words: str = "") -> dict[int, str]:
    """Each rank's words; a follower's name the rank it followed (the cause, else the first that
    ran out of data)."""
    short = uneven(ends)
    leader = first_cause(ends) or (min(short, key=lambda e: e.steps) if short else None)
    out = {}
    for end in ends:
        text = words(end, stopped_words)
        if end.ending == "follower" and leader is not None:
            text = f"ended when rank {leader.rank} did at step {end.steps} (its collectives lost their peer)"
        out[end.rank] = text
    return out


def uneven_finding(short: list[RankEnd], ends: list[RankEnd], job: RunRecord) -> Finding:
    """Ranks that ran out of batches while another still had some: named, with the fix."""
    first = min(short, key=lambda e: e.steps)
    others = [e for e in ends if e.rank != first.rank]
    longest = max(others, key=lambda e: (e.samples or 0, e.steps))
    sizes = ""
    if first.samples is not None and longest.samples is not None:
        sizes = f" ({first.samples} samples against {longest.samples})"
    title = (
        f"uneven inputs: rank {first.rank} ran out of batches after {first.steps} steps while "
        f"rank {longest.rank} still had some{sizes}; the ranks that go on wait in a collective "
        "for one that is gone (with NCCL, until its timeout)"
    )
    fix = (
        "give every rank the same number of batches: DataLoader(dataset, "
        "sampler=DistributedSampler(dataset)) pads the shards to equal length (or drop_last=True "
        "there); where ranks must see different amounts of data, run the loop under "
        "`with torch.distributed.algorithms.Join([model]):`"
    )
    loader = job.loader
    file, line = split_where(loader.created_at if loader is not None else None)
    return Finding(kind="ddp.uneven-inputs", title=title, fix=fix, file=file, line=line,
                   severity="critical")  # fmt: skip


def stalled(
    job: RunRecord, states: list[StreamState], where: dict[int, stacks.StoppedAt], at: float
) -> None:
    """Where each rank was when torchdoctor stopped the job; when every rank had stopped
    stepping, the job stalled: the rank that was not waiting in a collective stopped first,
    and the verdict says so instead of judging stale steps."""
    report = job.distributed
    if report is None:
        return
    for rank in report.ranks:
        if rank.rank in where:
            rank.stopped_at = where[rank.rank].words()
            rank.in_collective = where[rank.rank].in_collective
    gaps = {s.hello.rank: None if _stepped_lately(s, at) else stacks.stalled_for(s.logged, at)
            for s in states if s.hello}  # fmt: skip
    if not where or not gaps or any(g is None for g in gaps.values()):
        return  # some rank was still stepping: the job was stopped, not stalled
    steps = {e.rank: e.steps for e in rank_ends(states, {}, "stopped")}
    stuck = sorted(r for r, w in where.items() if not w.in_collective)
    waiting = sorted(r for r, w in where.items() if w.in_collective)
    if stuck:
        first = stuck[0]
        text = (
            f"the job stalled: rank {first} stopped stepping at step {steps.get(first, '?')}, at "
            f"{where[first].words()}"
        )
        if waiting:
            text += f"; rank(s) {', '.join(map(str, waiting))} waited for it in a collective"
        fix = f"find why rank {first} stops at {where[first].where}"
    else:
        text = "the job stalled: every rank was waiting in a collective (a mismatched collective?)"
        fix = "check that every rank calls the same collectives in the same order"
    job.notes.insert(0, f"{text} until torchdoctor stopped it")
    stacks.tell_first(job, job.notes[0])
    if job.verdict is not None:  # the steps before the stall are not called balanced
        before = re.sub(r"^the \d+ ranks are balanced[^;]*; ", "", job.verdict.why)
        job.verdict.why = f"{text}; in the steps measured before: {before}"
        job.verdict.next = f"{fix}; then run torchdoctor again"


def _stepped_lately(state: StreamState, at: float) -> bool:
    """Its heartbeat said it stepped on within the stall's span before ``at``: it was stepping,
    its steps unlogged (a rank held until Join lets the job go, its phases cut)."""
    return state.stepped_at is not None and at - state.stepped_at < stacks.STALL_S
