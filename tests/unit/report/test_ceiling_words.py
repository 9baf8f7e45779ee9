"""A ceiling reads the same in the terminal, on the page and in the verdict: below 1.05x it is
"no gain from faster data", never "0.71x faster"."""

from __future__ import annotations

import io

from rich.console import Console

from torchdoctor.analysis.verdict import summarise
from torchdoctor.record import LoaderSettings, RunRecord, StepSeries
from torchdoctor.report.html import render_html
from torchdoctor.report.terminal import render


def _record(model_alone_ms: float) -> RunRecord:
    steps = StepSeries()
    for _ in range(6):
        parts = {"data_wait": 0.2, "to_device": 0.0, "forward": 4.0, "backward": 4.0,
                 "optimizer": 1.0, "other": 0.8}  # fmt: skip
        for k, v in parts.items():
            steps.part(k).append(v)
        steps.step_ms.append(sum(parts.values()))
        steps.batches.append(1)
    rec = RunRecord(steps=steps, model_alone=[model_alone_ms] * 6, command=["train.py"])
    rec.loader = LoaderSettings(
        "D", 100, 8, 0, False, False, None, False, "BatchSampler", "default_collate"
    )
    rec.seen = {"batches": 6}
    summarise(rec)
    return rec


def _terminal(rec: RunRecord) -> str:
    out = io.StringIO()
    render(rec, console=Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_a_ceiling_below_one_is_no_gain_everywhere():
    rec = _record(model_alone_ms=14.0)  # slower than the real 10 ms step: noise
    assert rec.ceiling_speedup < 1
    for text in (_terminal(rec), render_html(rec), rec.verdict.why):
        assert "x faster" not in text.replace("no faster", "")
    assert "no gain from faster data" in _terminal(rec)
    assert "no gain from faster data" in render_html(rec)
    assert "is no faster" in rec.verdict.why
    (row,) = [line for line in _terminal(rec).splitlines() if "ceiling speedup from" in line]
    assert "none (no faster: 0." in row, row


def test_a_real_ceiling_reads_the_same_in_both():
    rec = _record(model_alone_ms=5.0)
    lo, hi = rec.ceiling_interval
    words = f"{rec.ceiling_speedup:.2f}x [{lo:.2f}-{hi:.2f}] faster if data cost nothing"
    assert words in _terminal(rec) and words in render_html(rec)
    # 2% of the step in input cannot make the step 2x faster: the words say it is noise
    assert "noise" in words + _terminal(rec)
