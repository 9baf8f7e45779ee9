"""torchdoctor's own cost per step is said, in the terminal and on the page, once it is 1% of the
step or more, and not below."""

from __future__ import annotations

import io

from rich.console import Console

from torchdoctor.analysis.verdict import capture_cost_words, summarise
from torchdoctor.record import Environment, RunRecord, StepSeries
from torchdoctor.report.html import render_html
from torchdoctor.report.terminal import render


def _record(cost_ms: float) -> RunRecord:
    steps = StepSeries()  # 5 ms steps
    parts = {"data_wait": 0.1, "to_device": 0.0, "forward": 2.0, "backward": 2.0,
             "optimizer": 0.5, "other": 0.4}  # fmt: skip
    for _ in range(6):
        steps.add_step(parts, 1)
    rec = RunRecord(steps=steps, command=["train.py"])
    rec.env = Environment("2.13", "3.11", "linux", "cpu", "cpu", "host clock", 1, 2, 2)
    rec.overhead_ms["capture_per_step_ms"] = cost_ms
    summarise(rec)
    return rec


def _terminal(rec: RunRecord) -> str:
    out = io.StringIO()
    render(rec, console=Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_a_cost_of_one_percent_of_the_step_is_said_in_both_places():
    rec = _record(0.1)  # 2% of 5 ms
    words = capture_cost_words(rec)
    assert words.startswith(
        "torchdoctor's hooks took 100 us of CPU time in each measured step (2% of it)"
    )
    assert words in _terminal(rec)
    assert words.replace("'", "&#x27;") in render_html(rec)


def test_a_cost_below_one_percent_is_not_said():
    rec = _record(0.02)  # 0.4% of 5 ms
    assert capture_cost_words(rec) == ""
    assert "hooks took" not in _terminal(rec)
