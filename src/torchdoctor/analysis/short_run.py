"""The verdict of a run that ended before it measured enough steps: what to do next depends on
how it ended, which is why the status is set before the verdict is derived (``process.ending``)."""

from __future__ import annotations

from dataclasses import replace

from ..record import (
    INTERNAL_ERROR,
    INTERRUPTED,
    KILLED,
    OUT_OF_MEMORY,
    PARTIAL,
    SCRIPT_ERROR,
    TIMED_OUT,
    TOO_LARGE,
    UNKNOWN,
    RunRecord,
    Verdict,
)

#: Measured steps a verdict needs from a run that ended before its measurement did (a mean of
#: fewer says little: one slow first step decides it).
MIN_VERDICT_STEPS = 3
#: What to do first about a run that ran out of memory (before any speed advice).
OOM_NEXT = (
    "make the step fit first: a smaller batch size (with gradient accumulation to keep the "
    "effective batch), activation checkpointing (torch.utils.checkpoint) on the largest blocks, "
    "or mixed precision (torch.autocast); then run torchdoctor again"
)
#: What to do about a run one of whose allocations asked for more than the whole memory.
TOO_LARGE_NEXT = (
    "check the shape of the tensor made at the line that ran out (a dimension multiplied by "
    "mistake, a count used as a size): one allocation asked for more than the whole memory, "
    "which no batch size, checkpointing or mixed precision changes; then run torchdoctor again"
)


def oom_next(record: RunRecord) -> str:
    """What a run that ran out of memory is told to do first."""
    too_large = record.ending is not None and TOO_LARGE in record.ending.words
    return TOO_LARGE_NEXT if too_large else OOM_NEXT


#: What to do about a verdict on too few steps, by how the run ended (``ENDED_SHORT``): the
#: status is set before the verdict is derived (``process.ending.settle``), so a run cut at the
#: bound is told to raise it.
_TOO_FEW_NEXT = {
    SCRIPT_ERROR: "fix the script's error (its traceback is above, and in the notes) and run "
    "torchdoctor again",
    KILLED: "find what ended the process (the notes say how it ended) and run torchdoctor again",
    OUT_OF_MEMORY: OOM_NEXT,  # or TOO_LARGE_NEXT: oom_next reads the ending
    PARTIAL: "give the run more data or epochs, or lower --warmup and --steps",
    TIMED_OUT: "raise --max-seconds, or lower --warmup and --steps",
    INTERRUPTED: "let the run measure a few more steps before stopping it",
    INTERNAL_ERROR: "see the note on torchdoctor's own failure",
}


def too_few(record: RunRecord, shares: dict[str, float]) -> Verdict:
    """The verdict of a run that ended with fewer than :data:`MIN_VERDICT_STEPS` measured."""
    n = len(record.steps.step_ms)
    return Verdict(
        kind=UNKNOWN,
        why=f"only {n} step{'' if n == 1 else 's'} measured before the run ended "
        f"({record.status}): too few for a verdict ({MIN_VERDICT_STEPS} needed); the step parts "
        "below cover those steps only",
        next=oom_next(record)  # out of memory: its Next depends on what ran out
        if record.status == OUT_OF_MEMORY
        else _TOO_FEW_NEXT.get(record.status, _TOO_FEW_NEXT[PARTIAL]),
        shares=shares,
    )


def fit_first(record: RunRecord, verdict: Verdict) -> Verdict:
    """A run that ran out of memory is told to make its step fit before any speed advice: the
    steps' verdict stands for the steps that fitted (too few for one already say so)."""
    if record.status != OUT_OF_MEMORY or verdict.kind == UNKNOWN:
        return verdict
    first = oom_next(record).removesuffix("; then run torchdoctor again")
    return replace(verdict, next=f"{first}; then {verdict.next}")
