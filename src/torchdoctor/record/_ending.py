"""How a run ended, as one value: decided once (``process.ending``), kept in the record, read by
every renderer and by the job's combination. Nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._kinds import STATUS_PRECEDENCE, EndingCause, Status

#: In an out-of-memory ending's words: one allocation asked for more than the whole memory, so
#: no batch size makes it fit (the verdict's Next then says to check that tensor's shape).
TOO_LARGE = "more than the whole"


@dataclass(frozen=True)
class Ending:
    """How a run ended: its status, the exit status of ``torchdoctor run``, what ended it and the
    words that say so. The record's ``status`` is this value's (kept beside it so that records
    written before it existed load unchanged)."""

    status: Status
    exit_status: int
    cause: EndingCause
    #: The notes that tell how the run ended (also among the record's notes): a stop from outside
    #: replaces them as one value, where they used to be found again by their opening words.
    notes: list[str] = field(default_factory=list)
    #: What ended the run first, in one sentence, where that says more than the status (the rank
    #: that ended a job, its uneven inputs, a stall); empty: the stop line says it all.
    words: str = ""

    @property
    def precedence(self) -> int:
        """Where the status stands in :data:`STATUS_PRECEDENCE`: 0 is the worst ending."""
        return STATUS_PRECEDENCE.index(self.status)
