"""The exit status of ``torchdoctor run`` for each status of a record: one table."""

from __future__ import annotations

from ..._errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NO_TRAINING,
    EXIT_OK,
    EXIT_OUT_OF_MEMORY,
    EXIT_SCRIPT_ERROR,
    EXIT_TIMED_OUT,
)
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
    RunRecord,
    Status,
)

#: The exit status of ``torchdoctor run`` for each status of a record. A run that ended well
#: (``complete``, ``partial``) without a measured step is ``no-training``'s (see :func:`exit_status`).
EXIT_FOR: dict[Status, int] = {
    COMPLETE: EXIT_OK,
    PARTIAL: EXIT_OK,
    NO_TRAINING: EXIT_NO_TRAINING,
    SCRIPT_ERROR: EXIT_SCRIPT_ERROR,
    OUT_OF_MEMORY: EXIT_OUT_OF_MEMORY,
    KILLED: EXIT_SCRIPT_ERROR,
    TIMED_OUT: EXIT_TIMED_OUT,
    INTERRUPTED: EXIT_INTERRUPTED,
    INTERNAL_ERROR: EXIT_INTERNAL,
}


def exit_status(status: Status, measured: bool) -> int:
    """The exit status that goes with ``status`` (:data:`EXIT_FOR`); a run that ended well
    without a measured step (``measured``: a step measured, or a whole run's step) trained none."""
    code = EXIT_FOR[status]
    return EXIT_NO_TRAINING if code == EXIT_OK and not measured else code


def exit_for(record: RunRecord) -> int:
    """The exit status of a record: its ending's, else the one its status gives."""
    if record.ending is not None and record.ending.status == record.status:
        return record.ending.exit_status
    return exit_status(record.status, measured_anything(record))


def measured_anything(record: RunRecord) -> bool:
    """Whether the run measured a step (a whole run: took one)."""
    whole = record.whole_run
    return bool(record.measured_steps or (whole is not None and whole.steps))
