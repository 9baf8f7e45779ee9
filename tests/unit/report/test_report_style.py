"""One look per verdict kind and severity, shared by every renderer."""

from __future__ import annotations

import io
import re

from rich.console import Console

from torchdoctor.record import SEVERITIES, VERDICT_KINDS, Finding, RunRecord, Verdict
from torchdoctor.report import _style
from torchdoctor.report.terminal import render
from torchdoctor.report.trace_terminal import render_trace_report


def test_every_kind_and_severity_has_a_look():
    assert set(_style.VERDICTS) == set(VERDICT_KINDS)
    assert set(_style.SEVERITIES) == set(SEVERITIES)
    # Values an older or newer record may hold still render.
    assert _style.verdict_look("SOMETHING-BOUND") == ("SOMETHING-BOUND", "bold")
    assert _style.severity_look("fatal") == ("fatal", "")


def _ansi(draw, record: RunRecord) -> str:
    console = Console(width=200, file=io.StringIO(), force_terminal=True, color_system="standard")
    draw(record, console)
    return console.file.getvalue()


def _opens(style: str) -> str:
    """The escape sequence with which rich starts text of ``style``."""
    console = Console(file=io.StringIO(), force_terminal=True, color_system="standard")
    console.print("\0", style=style, end="")
    return console.file.getvalue().split("\0")[0]


def test_run_and_analyze_reports_colour_verdicts_and_severities_alike():
    for kind in VERDICT_KINDS:
        for severity in SEVERITIES:
            record = RunRecord(
                verdict=Verdict(kind, "why", "next"),
                findings=[Finding(kind="host-sync", title="t", fix="f", severity=severity)],
            )
            # The run report writes "[info]", the analyze report "  info   ": same colour.
            verdict = re.escape(_opens(_style.VERDICTS[kind].style)) + re.escape(kind)
            marked = re.escape(_opens(_style.SEVERITIES[severity].style)) + rf"[\[ ]*{severity}\b"
            for draw in (render, render_trace_report):
                out = _ansi(draw, record)
                assert re.search(verdict, out), (draw.__name__, kind)
                assert re.search(marked, out), (draw.__name__, severity)
