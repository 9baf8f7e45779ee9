"""Version-1 records render exactly as they did before the record was typed.

``run_v1.report.txt`` is ``COLUMNS=100 torchdoctor report FILE`` as printed before schema 2, and
``analyze_v1.analyze.txt`` is what ``torchdoctor analyze`` drew for the same analysis (trailing
spaces stripped): ``report`` draws an analysis as ``analyze`` did, never as a stopped run.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from paths import DATA
from torchdoctor.record import RunRecord, TraceReport
from torchdoctor.report.terminal import render
from torchdoctor.report.trace_terminal import render_trace_report

RECORDS = DATA / "records"


def _text(draw, record: RunRecord) -> str:
    console = Console(width=100, file=io.StringIO(), record=True, color_system=None)
    draw(record, console)
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())


@pytest.mark.parametrize("name, drawn", [("run_v1", "report"), ("analyze_v1", "analyze")])
def test_report_of_a_v1_record_is_unchanged(name, drawn):
    record = RunRecord.load(RECORDS / f"{name}.json")
    assert _text(render, record) == (RECORDS / f"{name}.{drawn}.txt").read_text()


def test_analyze_report_of_a_v1_record_is_unchanged():
    record = RunRecord.load(RECORDS / "analyze_v1.json")
    assert isinstance(record.trace, TraceReport)
    assert _text(render_trace_report, record) == (RECORDS / "analyze_v1.analyze.txt").read_text()


def test_a_trace_that_was_not_analysed_draws_no_trace_section():
    record = RunRecord.load(RECORDS / "run_v1.json")
    full = _text(render, record)
    assert "profiler trace: tr/vm_3693" in full and "Step time, claimed" in full
    record.trace = TraceReport(recorded_files=record.trace.recorded_files)
    text = _text(render, record)
    assert "profiler trace" not in text and "Step time, claimed" not in text
