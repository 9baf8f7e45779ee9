"""Setting an ending on a record: its status, its notes, then the verdict derived from them."""

from __future__ import annotations

from ...analysis.verdict import summarise
from ...record import Ending, RunRecord


def settle(record: RunRecord, ending: Ending, derive: bool = True, first: bool = False) -> None:
    """Set ``ending`` on ``record``: its status, and its notes in place of the notes of the
    ending it replaces (``first``: before the others, as a job's lead); then, with ``derive``,
    the verdict, which reads the status (a run cut at the bound after one step is told to raise
    the bound, not to give the run more data)."""
    before = record.ending
    if before is not None:
        record.notes = [n for n in record.notes if n not in before.notes or n in ending.notes]
    new = [n for n in ending.notes if n not in record.notes]
    record.notes = [*new, *record.notes] if first else [*record.notes, *new]
    record.ending = ending
    record.status = ending.status
    if derive:
        summarise(record)
