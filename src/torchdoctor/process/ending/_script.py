"""How a script ended in its own process (``torchdoctor run``'s child, ``run_script``, ``watch``),
from what that process saw: how the script's code returned, and what had been measured."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ..._errors import EXIT_INTERRUPTED, EXIT_SCRIPT_ERROR
from ...record import (
    COMPLETE,
    INTERNAL_ERROR,
    INTERRUPTED,
    NO_TRAINING,
    OUT_OF_MEMORY,
    PARTIAL,
    SCRIPT_ERROR,
    Ending,
    phase_names,
)
from ._exit import exit_status
from ._memory import OutOfMemory

#: How the script's code returned (``ScriptEnd.ended``): ``sys.exit(n)`` is ``EXITED`` n.
FINISHED = "finished"
STOPPED = "stopped"  # torchdoctor's own stop, the measurement done
CTRL_C: str = INTERRUPTED  # KeyboardInterrupt, in the word of the status it leads to
RAISED = "error"
EXITED = "exited with status"

#: How a script ends on its own, for a whole run (its accounts are then not cut short).
WHOLE_ENDED = (FINISHED, STOPPED, f"{EXITED} 0")

#: How the note begins of a rank torchdoctor stopped because another rank of its job ended
#: (torchdoctor's own collective lost its peer): a follower, never the cause.
PEER_LEFT_NOTE = "stopped: another rank of the job ended and this rank's collectives lost it"
INTERRUPTED_NOTE = "interrupted (Ctrl-C)"


def exited(code: object) -> str:
    """``ScriptEnd.ended`` of ``sys.exit(code)``: ``sys.exit("message")`` exits with 1, as
    Python does; ``sys.exit()`` with 0."""
    return f"{EXITED} {0 if code is None else code if isinstance(code, int) else 1}"


@dataclass(frozen=True)
class ScriptEnd:
    """The evidence of a script's own process: how its code returned and what was measured."""

    #: :data:`FINISHED`, :data:`STOPPED`, :data:`CTRL_C`, :data:`RAISED`, or :func:`exited`'s.
    ended: str
    measured_steps: int = 0
    #: The capture's counts (``optimizer_steps``, ``batches``, ``forward_calls``...).
    seen: Mapping[str, int] = field(default_factory=dict)
    warmup: int = 0
    steps: int = 0
    #: The capture's phase when the script ended (``phase_names``).
    phase: str = phase_names.MEASURE
    #: The type name of the exception the script raised, if it raised.
    error: str = ""
    #: The exception as out of memory (which memory, the size asked, the script's line), if so.
    out_of_memory: OutOfMemory | None = None
    #: torchdoctor's own failure inside the script's calls (``Type: message``), if any.
    internal_error: str = ""
    #: What said another rank of the job left (torchdoctor's own collective lost it), if so.
    peer_lost: str = ""
    #: A rank's data ran out under Join before another's (uneven inputs): the job was stopped
    #: where Join let every rank go.
    uneven_join: bool = False
    #: ``run --whole``: the steps the whole run took (None: not a whole run).
    whole_steps: int | None = None
    model_alone_steps: int = 0

    @property
    def exited_badly(self) -> bool:
        """``sys.exit(n)`` with n other than 0 (``sys.exit("message")`` too)."""
        return self.ended.startswith(EXITED) and self.ended != f"{EXITED} 0"


def decide_script(end: ScriptEnd) -> Ending:
    """How the script ended, as its own process saw it. Precedence: torchdoctor's own failure,
    then a lost peer, then the measurement done, then a whole run's own end, then Ctrl-C, the
    script's error, ``sys.exit(n)``, and last a script that ended on its own early."""
    measured = end.measured_steps
    if end.internal_error:
        return _ending(end, INTERNAL_ERROR, "torchdoctor", [
            f"torchdoctor itself failed ({end.internal_error}) and stopped the script; "
            "torch was restored. Please report this with the traceback above."
        ])  # fmt: skip
    if end.peer_lost:
        note = f"{PEER_LEFT_NOTE} after {_measured(measured)} ({end.peer_lost})"
        return _ending(end, PARTIAL, "peer-lost", [note])
    if end.uneven_join and end.ended == STOPPED and end.phase != phase_names.DONE:
        # its notes say where Join let the ranks go; the phases after it did not run
        return _ending(end, PARTIAL, "uneven-join", [])
    if end.ended == STOPPED or (end.phase == phase_names.DONE and not end.uneven_join):
        # (after an uneven join the phases were cut, not done: the job was held until Join let
        # its ranks go, and Ctrl-C or the bound there ends it as anywhere else)
        return _ending(end, COMPLETE, "measured", [])
    if end.whole_steps and end.ended in WHOLE_ENDED:
        # a whole run ends with the script; its steps' verdict covers the measured window
        return _ending(end, COMPLETE, "script-end", [])
    if end.ended == CTRL_C:
        return _ending(
            end, INTERRUPTED, "ctrl-c", [f"{INTERRUPTED_NOTE} after {_measured(measured)}"]
        )
    seen = _seen_text(end.seen)
    if end.ended == RAISED and end.out_of_memory is not None:
        words = end.out_of_memory.words()
        note = f"{words} after {_measured(measured)}; torchdoctor saw {seen}"
        return replace(_ending(end, OUT_OF_MEMORY, "out-of-memory", [note]), words=words)
    if end.ended == RAISED:
        return _ending(end, SCRIPT_ERROR, "raised", [
            f"the script raised {end.error} after {_measured(measured)}; torchdoctor saw {seen}"
        ])  # fmt: skip
    if end.exited_badly:
        # sys.exit(n), an argparse error of the script (2); sys.exit(0), e.g. its --help, is an end
        return _ending(end, SCRIPT_ERROR, "exited", [
            f"the script {end.ended} (sys.exit) after {_measured(measured)}; torchdoctor saw {seen}"
        ])  # fmt: skip
    return _ending(end, NO_TRAINING if measured == 0 else PARTIAL, "script-end", _early(end))


def _early(end: ScriptEnd) -> list[str]:
    """Why a script that ended on its own before the measurement finished left so little."""
    ended, measured = end.ended, end.measured_steps
    optimizer_steps = end.seen.get("optimizer_steps", 0)
    if measured == 0 and optimizer_steps == 0:
        how = "ended" if ended == FINISHED else ended
        return [f"the script {how} without a training step: torchdoctor saw {_seen_text(end.seen)}"]
    if measured == 0:
        return [
            f"the script {ended} after {optimizer_steps} optimizer steps, fewer than "
            f"the {end.warmup} warmup steps: lower --warmup or give it more data/epochs"
        ]
    if end.phase in (phase_names.WARMUP, phase_names.MEASURE):
        return [
            f"the script {ended} after {measured} of {end.steps} measured steps "
            "(its data or epochs ran out); the figures cover those steps only"
        ]
    if end.phase == phase_names.MODEL_ALONE:
        return [
            f"the script {ended} during the model-alone phase after "
            f"{end.model_alone_steps} of {end.steps} steps"
        ]
    return []


def _ending(end: ScriptEnd, status: str, cause: str, notes: list[str]) -> Ending:
    """The ending with its exit status: how the script's code returned decides first (Ctrl-C
    after the measurement finished is still 130, a script that raised or exited non-zero is the
    script's error), then the status (:func:`exit_status`)."""
    if status in (INTERNAL_ERROR, OUT_OF_MEMORY):
        code = exit_status(status, True)  # type: ignore[arg-type]
    elif end.ended == CTRL_C:
        code = EXIT_INTERRUPTED
    elif end.ended == RAISED or end.exited_badly:
        code = EXIT_SCRIPT_ERROR
    else:
        code = exit_status(status, bool(end.measured_steps or end.whole_steps))  # type: ignore[arg-type]
    return Ending(status, code, cause, notes)  # type: ignore[arg-type]


def _measured(n: int) -> str:
    return f"{n} measured step" + ("" if n == 1 else "s")


def _seen_text(seen: Mapping[str, int]) -> str:
    steps = seen.get("optimizer_steps", 0)
    return (
        f"{seen.get('dataloader_iterators', 0)} DataLoader iteration(s), "
        f"{seen.get('batches', 0)} batch(es), {seen.get('forward_calls', 0)} model call(s), "
        f"{seen.get('backward_calls', 0)} backward call(s) and "
        + (f"{steps} optimizer step(s)" if steps else "no optimizer.step()")
    )
