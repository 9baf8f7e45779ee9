"""The page says under each trial what the terminal says: the compile time, each graph break,
the settings tried with the pick, the code to paste and its caveats."""

from __future__ import annotations

import io
from html import unescape

from rich.console import Console

from torchdoctor.record import JudgedSpeedup, RunRecord, Stat, Trial, TrialPoint
from torchdoctor.report.html import render_html
from torchdoctor.report.terminal import render


def _record() -> RunRecord:
    compile_trial = Trial(
        name="compile",
        changed="torch.compile(model)",
        steps=[8.0] * 6,
        step_ms=Stat.of([8.0] * 6),
        warmup_ms=[4200.0, 9.0],
        judged=JudgedSpeedup(1.25, 1.2, 1.3, 0.1, "IMPROVED"),
        code="model = torch.compile(model)",
        caveats=["the first step compiles"],
        detail={
            "graph_breaks": [
                {
                    "file": "train.py",
                    "line": 12,
                    "source": "if x.sum() > 0:",
                    "reason": "data-dependent branch",
                }
            ]
        },  # fmt: skip
    )
    batch_trial = Trial(
        name="batch-size",
        changed="batch size 32 -> 64",
        judged=JudgedSpeedup(1.02, 0.95, 1.1, 0.1, "NO CHANGE"),
        pick=None,
        points=[
            TrialPoint("32", Stat.of([10.0]), 3200.0, 120.0),
            TrialPoint("64", Stat.of([19.0]), 3368.0, 230.0),
        ],  # fmt: skip
    )
    return RunRecord(command=["train.py"], trials=[compile_trial, batch_trial])


def test_every_trial_line_of_the_terminal_is_on_the_page():
    record = _record()
    out = io.StringIO()
    render(record, console=Console(file=out, width=300, color_system=None))
    terminal = out.getvalue()
    page = " ".join(unescape(render_html(record)).split())
    said = [
        "compile: first step 4.2 s (compile time, not in the speedup)",
        "graph break at train.py:12: if x.sum() > 0: (data-dependent branch)",
        "batch-size: 32: 3200 samples/s (120 MB), 64: 3368 samples/s (230 MB); no pick",
        "model = torch.compile(model)",
        "caveat: the first step compiles",
    ]
    for line in said:
        assert line in " ".join(terminal.split()), line
        assert line in page, line
