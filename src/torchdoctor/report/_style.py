"""How the terminal reports show the record's vocabulary: one label and colour per value.

The run report, the trace report and the loader section used to carry their own tables, and
the two verdict tables had drifted (HOST-BOUND was magenta in one, red in the other). Every
renderer now looks values up here, and ``tests/unit/report/test_report_style.py`` checks that
each verdict kind and severity of :mod:`torchdoctor.record` has an entry, so a new kind gets
its look here before it can be drawn.
"""

from __future__ import annotations

from typing import NamedTuple

from ..record import (
    COMPLETE,
    INTERNAL_ERROR,
    INTERRUPTED,
    KILLED,
    NO_TRAINING,
    PARTIAL,
    SCRIPT_ERROR,
    TIMED_OUT,
    Severity,
    Status,
    VerdictKind,
)


class Look(NamedTuple):
    """The text a value is shown as, and its rich style."""

    label: str
    style: str


VERDICTS: dict[VerdictKind, Look] = {
    "INPUT-BOUND": Look("INPUT-BOUND", "bold yellow"),
    "COMPUTE-BOUND": Look("COMPUTE-BOUND", "bold green"),
    "HOST-BOUND": Look("HOST-BOUND", "bold magenta"),
    "COMMUNICATION-BOUND": Look("COMMUNICATION-BOUND", "bold blue"),
    "UNKNOWN": Look("UNKNOWN", "bold"),
}
SEVERITIES: dict[Severity, Look] = {
    "critical": Look("critical", "bold red"),
    "warning": Look("warning", "yellow"),
    "info": Look("info", "dim"),
}
#: How a run ended, when not on purpose: shown first, in the verdict's place (terminal and page).
#: The style's colour names the page's class too: red endings ``bad``, yellow ones ``warn``.
ENDINGS: dict[Status, Look] = {
    SCRIPT_ERROR: Look("FAILED", "bold red"),
    KILLED: Look("KILLED", "bold red"),
    INTERNAL_ERROR: Look("TORCHDOCTOR FAILED", "bold red"),
    NO_TRAINING: Look("NO TRAINING STEP", "bold red"),
    INTERRUPTED: Look("STOPPED", "bold yellow"),
    TIMED_OUT: Look("STOPPED AT THE BOUND", "bold yellow"),
    PARTIAL: Look("ENDED EARLY", "bold yellow"),
}


def ending_look(status: str) -> Look | None:
    """The look of a run's ending; ``None`` for a run that completed its measurement."""
    if status == COMPLETE:
        return None
    return ENDINGS.get(status, Look(status.upper(), "bold yellow"))  # type: ignore[call-overload]


#: A measured gain or a choice made for the user (a verified speedup, the sweep's pick).
GOOD = "bold green"
#: A measurement that failed.
BAD = "red"


def verdict_look(kind: VerdictKind) -> Look:
    """The look of a verdict kind; a kind this version does not know is shown as it is, bold."""
    return VERDICTS.get(kind, Look(kind, "bold"))


def severity_look(severity: Severity) -> Look:
    """The look of a severity; one this version does not know is shown plain."""
    return SEVERITIES.get(severity, Look(severity, ""))


#: ``run --whole``'s kinds of cost: the colour of each (terminal style, page colour) and its words.
WHOLE_KINDS: dict[str, tuple[str, str, str]] = {
    "startup": ("magenta", "#a05fb4", "startup"),
    "steps": ("green", "#3c9a5f", "training steps"),
    "slow-steps": ("yellow", "#d9a300", "slow steps"),
    "epoch-boundary": ("cyan", "#2a9bb5", "epoch boundaries"),
    "evaluation": ("blue", "#4a6fd1", "evaluation"),
    "checkpoint": ("red", "#c8553d", "checkpoints"),
    "between-steps": ("bright_magenta", "#d46fa8", "between steps"),
    "tail": ("white", "#9a9a9a", "tail"),
}


def whole_kind_look(kind: str) -> tuple[str, str, str]:
    """(terminal style, page colour, words) of a whole run's kind; an unknown one plain."""
    return WHOLE_KINDS.get(kind, ("", "#777777", kind))
