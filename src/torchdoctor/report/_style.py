"""How every report shows the record's vocabulary: one label and colour per value, for the
terminal and the page alike.

The run report, the trace report and the loader section used to carry their own tables, and
the two verdict tables had drifted (HOST-BOUND was magenta in one, red in the other); the page
then kept a second palette in its CSS and the charts a third table naming it. Every renderer now
looks values up here: the page's CSS is written from :func:`page_palette_css`, the charts fill
with :attr:`Colour.css`, the terminal draws a step part in the same hex.
``tests/unit/report/test_report_style.py`` checks that each verdict kind and severity of
:mod:`torchdoctor.record` has an entry, so a new kind gets its look here before it can be
drawn, and ``test_colours.py`` that a step part has one colour in the terminal, the CSS and the
charts.
"""

from __future__ import annotations

from typing import NamedTuple

from ..record import (
    COMPLETE,
    INTERNAL_ERROR,
    INTERRUPTED,
    KILLED,
    NO_TRAINING,
    OUT_OF_MEMORY,
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
    OUT_OF_MEMORY: Look("OUT OF MEMORY", "bold red"),
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


class Colour(NamedTuple):
    """One colour of the reports: the page's CSS variable that holds it, and its value.

    The terminal shows the same hex (rich steps it down to the colours a terminal has), so a
    part is the same colour in the terminal report, on the page and in its charts.
    """

    var: str
    hex: str

    @property
    def css(self) -> str:
        """How a chart or a rule on the page names it: the variable, so a theme can change it."""
        return f"var(--{self.var})"


DATA = Colour("c-data", "#d99a00")
COPY = Colour("c-copy", "#b86e00")
FORWARD = Colour("c-fwd", "#2f7ed8")
BACKWARD = Colour("c-bwd", "#6a4fc9")
OPTIMIZER = Colour("c-opt", "#1f9e74")
EVALUATION = Colour("c-eval", "#4fa3b5")
OTHER = Colour("c-other", "#8a8f98")
MEMSET = Colour("c-mem", "#e0b95a")
CPU_OPS = Colour("c-cpu", "#c9527a")
#: A counterfactual with its cost made free (the model alone).
FREED = Colour("c-free", "#1f9e74")

#: The colour of each part of a measured step (``record.STEP_PARTS``).
PART_COLOURS: dict[str, Colour] = {
    "data_wait": DATA,
    "to_device": COPY,
    "forward": FORWARD,
    "backward": BACKWARD,
    "optimizer": OPTIMIZER,
    "evaluation": EVALUATION,
    "other": OTHER,
}
#: The parts of a profiler trace's step (``analyze``), in the colours of the step parts they
#: are closest to.
TRACE_PART_COLOURS: dict[str, Colour] = {
    "gpu_kernels": FORWARD,
    "memcpy": COPY,
    "memset": MEMSET,
    "communication": OPTIMIZER,
    "runtime": BACKWARD,
    "dataloader": DATA,
    "cpu_ops": CPU_OPS,
    "other": OTHER,
}
#: The lines of a chart with several, in order (one per thread setting of a sweep).
LINE_COLOURS: tuple[Colour, ...] = (FORWARD, BACKWARD, DATA, OPTIMIZER, CPU_OPS)

#: The page's own colours, as (light, dark) for ``prefers-color-scheme``: its ground, text and
#: rules, and the tones of a gain (``good``), a failure (``bad``) and a warning.
PAGE_TONES: dict[str, tuple[str, str]] = {
    "bg": ("#fff", "#15171b"),
    "fg": ("#1d1f23", "#e6e8eb"),
    "muted": ("#5d6470", "#9aa1ab"),
    "card": ("#f4f5f7", "#1f2228"),
    "line": ("#d5d8de", "#343842"),
    "good": ("#137a47", "#4cc38a"),
    "bad": ("#c0392b", "#ef6f5e"),
    "warn": ("#a86500", "#e0a446"),
}
#: A verdict kind's colour on the page (its terminal style is in :data:`VERDICTS`).
VERDICT_PAGE_COLOURS: dict[VerdictKind, str] = {
    "INPUT-BOUND": "#b07b00",
    "COMPUTE-BOUND": "var(--good)",
    "HOST-BOUND": "#a0369b",
    "COMMUNICATION-BOUND": "#2f6fd8",
}


def page_palette_css() -> str:
    """The page's colour rules: every variable of the palette, light and dark, and the colour
    of each verdict kind's class."""
    palette = {c.var: c.hex for c in (*PART_COLOURS.values(), *TRACE_PART_COLOURS.values())}
    palette[FREED.var] = FREED.hex
    light = "; ".join(f"--{name}:{light}" for name, (light, _) in PAGE_TONES.items())
    colours = "; ".join(f"--{name}:{value}" for name, value in palette.items())
    dark = "; ".join(
        f"--{name}:{dark}" for name, (light, dark) in PAGE_TONES.items() if dark != light
    )
    verdicts = " ".join(f".{k} {{ color:{c}; }}" for k, c in VERDICT_PAGE_COLOURS.items())
    return (
        f":root {{ {light}; {colours}; }}\n"
        f"@media (prefers-color-scheme: dark) {{ :root {{ {dark}; }} }}\n{verdicts}\n"
    )
