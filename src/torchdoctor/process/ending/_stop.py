"""How a supervised run ended (``torchdoctor run``'s parent): the child's own ending when it sent
one, a stop torchdoctor handed on (the bound, a signal), or a process that died without a word."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from ..._errors import EXIT_INTERRUPTED
from ...record import (
    INTERNAL_ERROR,
    INTERRUPTED,
    KILLED,
    NO_TRAINING,
    PARTIAL,
    TIMED_OUT,
    Ending,
    Status,
)
from ._exit import exit_status

#: The causes of a child's ending that were the script's own way of ending: when torchdoctor
#: had handed it a stop, the script caught that stop (Lightning on SIGTERM, a loop inside
#: ``try: ... except KeyboardInterrupt``), and its words are replaced by the stop's.
OWN_CAUSES = ("script-end", "ctrl-c", "exited")
#: The statuses of a script that ended as if on its own before the measurement finished.
ENDED_EARLY: tuple[Status, ...] = (PARTIAL, NO_TRAINING)


def signal_name(signum: int) -> str:
    try:
        return f"{signal.Signals(signum).name} (signal {signum})"
    except ValueError:
        return f"signal {signum}"


@dataclass(frozen=True)
class Stop:
    """What the supervisor saw of the end of the script's process."""

    #: The run reached ``--max-seconds`` and torchdoctor stopped it.
    timed_out: bool = False
    #: The signal torchdoctor received (Ctrl-C, SIGTERM) and handed on, if any.
    signalled: int | None = None
    #: The signal arrived as the script ended, never handed on: the record is whole.
    late: bool = False
    #: The process's return code (negative: the signal that ended it), if it ended.
    returncode: int | None = None
    max_seconds: float | None = None
    #: ``run --whole``: a stop at the bound ends the whole run, whose goodput is projected.
    whole: bool = False
    #: torchdoctor's own failure the child streamed instead of its record, if any.
    failure: str = ""
    #: The Ctrl-C handed on went unanswered: the script had not ended this many seconds later,
    #: and torchdoctor stopped it (``None``: it ended, or no Ctrl-C was handed on).
    unanswered_s: float | None = None

    @property
    def handed_on(self) -> bool:
        """Whether torchdoctor asked the script to stop (its bound, a signal)."""
        return self.timed_out or self.signalled is not None


def decide_supervised(
    child: Ending | None, stop: Stop, measured: bool, whole_run: bool = False
) -> Ending:
    """How a supervised run ended: ``child`` is the ending its own process sent (None: the
    process died without its last word), ``measured`` whether a step was measured, ``whole_run``
    whether the record holds a whole run's accounts. Precedence: a late signal keeps the child's
    status; a stop handed on to a script that then ended as if on its own (or, at the bound, on
    a KeyboardInterrupt) is the stop's; else
    the child's own ending; without one, torchdoctor's failure, the bound, a signal, a kill."""
    if child is not None:
        if stop.late and stop.signalled is not None:
            # the record is whole; the exit status says that the user asked to stop (a
            # command that runs the script again, like `fix`, stops there)
            note = (
                f"{signal_name(stop.signalled)} arrived as the script ended: the record is complete"
            )
            return Ending(child.status, EXIT_INTERRUPTED, "late-signal", [*child.notes, note])
        # a KeyboardInterrupt at the bound is the bound's (a script's SIGTERM handler raised it)
        caught = child.status in ENDED_EARLY or (stop.timed_out and child.cause == "ctrl-c")
        if stop.handed_on and (whole_run or caught):
            # the script's own words for how it ended were about the stop torchdoctor handed it
            kept = [] if child.cause in OWN_CAUSES else list(child.notes)
            return _stopped(stop, [*kept, stop_words(stop)], measured)
        return child
    notes = [stop_words(stop)]
    if stop.failure:
        notes.append(f"torchdoctor itself failed: {stop.failure}. Please report this.")
        return Ending(INTERNAL_ERROR, exit_status(INTERNAL_ERROR, measured), "torchdoctor", notes)
    if stop.handed_on:
        return _stopped(stop, notes, measured)
    return Ending(KILLED, exit_status(KILLED, measured), "process-died", notes)


def decide_not_started(signum: int | None) -> Ending:
    """A run interrupted before the script started (``signum``: the signal, when known)."""
    how = f"torchdoctor received {signal_name(signum)}" if signum is not None else "interrupted"
    note = f"{how} before the script started"
    return Ending(INTERRUPTED, EXIT_INTERRUPTED, "signal", [note])


def _stopped(stop: Stop, notes: list[str], measured: bool) -> Ending:
    status = TIMED_OUT if stop.timed_out else INTERRUPTED
    return Ending(
        status, exit_status(status, measured), "bound" if stop.timed_out else "signal", notes
    )


def stop_words(stop: Stop) -> str:
    """How the script's process ended, in the report's words."""
    if stop.timed_out and stop.whole:
        return (
            f"stopped at the --max-seconds bound ({stop.max_seconds or 0:g} s): the whole run's "
            "accounts cover it until then, and its goodput is projected"
        )
    if stop.timed_out:
        return (
            f"stopped at the --max-seconds bound ({stop.max_seconds or 0:g} s) before the "
            "measurement finished; the figures cover what was measured until then (raise "
            "--max-seconds, or check that the loop reaches optimizer.step())"
        )
    if stop.signalled is not None and stop.unanswered_s is not None:
        return (
            f"torchdoctor received {signal_name(stop.signalled)} and handed it to the script, "
            f"which had not ended {stop.unanswered_s:g} s later (it ignored or caught it, or "
            "hung ending): torchdoctor stopped it; the figures cover what was measured until then"
        )
    if stop.signalled is not None:
        return f"torchdoctor received {signal_name(stop.signalled)} and stopped the script"
    code = stop.returncode
    if code is not None and code < 0:
        oom = " (the OOM killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return (
            f"the script's process was killed by {signal_name(-code)}{oom}; the figures "
            "cover what was measured until then"
        )
    return (
        f"the script's process ended with status {code} without torchdoctor's last word "
        "(os._exit, or a crash in native code); the figures cover what was measured until then"
    )
