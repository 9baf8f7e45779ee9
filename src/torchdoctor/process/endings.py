"""How a captured script ended, in the record's words: its status, the notes that explain it, and
the exit status of ``torchdoctor run``.

:data:`EXIT_FOR` is the one table from a record's status to the exit status; every place that
decides how a run ended (the script's own process here, the supervisor of one process, the
launcher of a job) sets the status and takes the exit status from it. How each status reads is
the renderers' (``report/_style.STATUS``, ``report.terminal``), checked against the same list of
statuses (``record.STATUSES``) by ``tests/unit/test_vocabulary.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NO_TRAINING,
    EXIT_OK,
    EXIT_SCRIPT_ERROR,
    EXIT_TIMED_OUT,
)
from ..record import RunRecord, phase_names

if TYPE_CHECKING:
    from ..capture import CaptureSession


def status_of(
    session: CaptureSession, record: RunRecord, ended: str, error: BaseException | None
) -> tuple[str, list[str]]:
    opts = session.options
    measured = record.measured_steps
    seen = session.data.seen
    if session.data.internal_error is not None:
        exc = session.data.internal_error
        return "internal-error", [
            f"torchdoctor itself failed ({type(exc).__name__}: {exc}) and stopped the script; "
            "torch was restored. Please report this with the traceback above."
        ]
    if session.ranks.peer_lost:
        return "partial", [
            f"{PEER_LEFT_NOTE} after {_measured(measured)} ({session.ranks.peer_lost})"
        ]
    if ended == "stopped" or session.phase_name == phase_names.DONE:
        return "complete", []
    whole = session.whole
    if whole is not None and ended in WHOLE_ENDED and whole.steps:
        # a whole run ends with the script; its steps' verdict covers the measured window
        if measured:
            return "complete", []
        return "complete", [
            f"the run took {whole.steps} step(s), no more than --warmup ({opts.warmup}): none "
            "was measured part by part for the verdict (lower --warmup to have some)"
        ]
    if ended == "interrupted":
        return "interrupted", [f"{INTERRUPTED_NOTE} after {_measured(measured)}"]
    notes: list[str] = []
    if ended == "error":
        notes.append(
            f"the script raised {type(error).__name__} after {_measured(measured)}; "
            f"torchdoctor saw {_seen_text(seen)}"
        )
        status = "script-error"
    elif _exited_badly(ended):
        # sys.exit(n), an argparse error of the script (2); sys.exit(0), e.g. its --help, is an end
        return "script-error", [
            f"the script {ended} (sys.exit) after {_measured(measured)}; torchdoctor saw "
            f"{_seen_text(seen)}"
        ]
    elif measured == 0:
        status = "no-training"
    else:
        status = "partial"
    if measured == 0 and ended != "error":
        if seen["optimizer_steps"] == 0:
            how = "ended" if ended == "finished" else ended
            notes.append(
                f"the script {how} without a training step: torchdoctor saw {_seen_text(seen)}"
            )
        else:
            notes.append(
                f"the script {ended} after {seen['optimizer_steps']} optimizer steps, fewer than "
                f"the {opts.warmup} warmup steps: lower --warmup or give it more data/epochs"
            )
    elif session.phase_name in (phase_names.WARMUP, phase_names.MEASURE) and ended != "error":
        notes.append(
            f"the script {ended} after {measured} of {opts.steps} measured steps "
            "(its data or epochs ran out); the figures cover those steps only"
        )
    elif session.phase_name == phase_names.MODEL_ALONE and ended != "error":
        notes.append(
            f"the script {ended} during the model-alone phase after "
            f"{len(record.model_alone)} of {opts.steps} steps"
        )
    return status, notes


def _measured(n: int) -> str:
    return f"{n} measured step" + ("" if n == 1 else "s")


def _exited_badly(ended: str) -> bool:
    """``sys.exit(n)`` with n other than 0 (``sys.exit("message")`` too)."""
    return ended.startswith("exited with status") and ended != "exited with status 0"


def _seen_text(seen: dict[str, int]) -> str:
    steps = seen["optimizer_steps"]
    return (
        f"{seen['dataloader_iterators']} DataLoader iteration(s), {seen['batches']} batch(es), "
        f"{seen['forward_calls']} model call(s), {seen['backward_calls']} backward call(s) and "
        + (f"{steps} optimizer step(s)" if steps else "no optimizer.step()")
    )


#: How the notes above begin that say how the script's process ended (``ended`` is "exited
#: with status N"); a whole run stopped by torchdoctor puts its own words instead
#: (process.supervisor).
INTERRUPTED_NOTE = "interrupted (Ctrl-C)"
EXITED_NOTE = "the script exited"
#: How every note above begins that tells how the script ended (or was interrupted): when the
#: script caught the stop torchdoctor handed it and ended as if on its own, these words were about
#: that stop, and the supervisor puts its own instead.
OWN_ENDING_NOTES = (INTERRUPTED_NOTE, EXITED_NOTE, "the script finished", "the script ended")
#: The statuses of a script that ended as if on its own before the measurement finished.
ENDED_EARLY = ("partial", "no-training")

#: How the note begins of a rank torchdoctor stopped because another rank of its job ended
#: (torchdoctor's own collective lost its peer): a follower, never the cause.
PEER_LEFT_NOTE = "stopped: another rank of the job ended and this rank's collectives lost it"

#: How a script ends on its own, for a whole run (its accounts are then not cut short).
WHOLE_ENDED = ("finished", "stopped", "exited with status 0")


#: The exit status of ``torchdoctor run`` for each status of a record. A run that ended well
#: (``complete``, ``partial``) without a measured step is ``no-training``'s (see :func:`exit_for`).
EXIT_FOR: dict[str, int] = {
    "complete": EXIT_OK,
    "partial": EXIT_OK,
    "no-training": EXIT_NO_TRAINING,
    "script-error": EXIT_SCRIPT_ERROR,
    "killed": EXIT_SCRIPT_ERROR,
    "timed-out": EXIT_TIMED_OUT,
    "interrupted": EXIT_INTERRUPTED,
    "internal-error": EXIT_INTERNAL,
}


def exit_for(record: RunRecord) -> int:
    """The exit status that goes with the record's status (:data:`EXIT_FOR`)."""
    status = EXIT_FOR[record.status]
    measured = record.measured_steps or (record.whole_run is not None and record.whole_run.steps)
    return EXIT_NO_TRAINING if status == EXIT_OK and not measured else status


def exit_status_of(record: RunRecord, ended: str) -> int:
    """The exit status of a run the script's own process saw end: :func:`exit_for`, except that
    how the script ended decides first (Ctrl-C after the measurement finished is still 130, a
    script that raised or exited non-zero is the script's error)."""
    if record.status == "internal-error":
        return EXIT_INTERNAL
    if ended == "interrupted":
        return EXIT_INTERRUPTED
    if ended == "error" or _exited_badly(ended):
        return EXIT_SCRIPT_ERROR
    return exit_for(record)
