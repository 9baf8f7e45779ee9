"""Every kind of record reads as what it is, in the terminal and in the browser (a real chromium):
a run, a distributed job, an ``analyze`` record and a comparison, each with its headline and its
sections, and none with another kind's words."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from browser import assert_offline, browser_views
from jobgen import rank_record
from paths import DATA, HTA_TRACES
from torchdoctor.analysis.compare import compare
from torchdoctor.analysis.distributed import combine
from torchdoctor.analysis.trace_analysis import analyze_trace
from torchdoctor.cli import main
from torchdoctor.record import RunRecord
from torchdoctor.report.compare import render_comparison, write_comparison_html
from torchdoctor.report.html import write_html
from torchdoctor.report.terminal import render

pytestmark = pytest.mark.integration

#: A trace of three ProfilerSteps, two analysed (the last is left out, as HTA does).
TRACE = HTA_TRACES / "nccl_parser_config"
#: The words of a run that torchdoctor stopped: never an analysis's.
STOPPED = "stopped the script on purpose"
#: Each chart's bars, with the title of each (``step N: part ms``), by section.
BARS = """() => Object.fromEntries([...document.querySelectorAll('section[id]')].map(s => [s.id,
  [...s.querySelectorAll('svg rect title')].map(t => t.textContent)]))"""


def _terminal(draw, *args) -> str:
    console = Console(width=120, file=io.StringIO(), record=True, color_system=None)
    draw(*args, console)
    return console.export_text()


def _page_headline(view: dict) -> tuple[str, str]:
    """The page's title line and the line under it."""
    lines = [line for line in view["text"].splitlines() if line.strip()]
    return lines[0], lines[1]


@pytest.fixture(scope="module")
def analysis() -> RunRecord:
    return analyze_trace([str(TRACE)], command=["torchdoctor", "analyze", str(TRACE)])


@pytest.fixture(scope="module")
def pages(analysis, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """Every page the tests below read, opened in one chromium: by name, the page and what the
    browser saw of it. The analysis's page is written by ``report --html``, as a user does."""
    folder = tmp_path_factory.mktemp("record_kinds")
    run = RunRecord.load(DATA / "records" / "run_v1.json")
    job = combine([rank_record(0, 0.1, 45.0, 4.0), rank_record(1, 40.0, 3.0, 44.0)])
    assert main(["report", "--html", str(folder / "an.html"),
                 str(analysis.save(folder / "an.json"))]) == 0  # fmt: skip
    same, mixed = compare(run, run), compare(run, analysis)
    paths = {
        "run": (write_html(run, folder / "run.html"), BARS),
        "job": (write_html(job, folder / "job.html"), None),
        "analysis": (folder / "an.html", BARS),
        "comparison": (write_comparison_html(same, run, run, folder / "c.html"), None),
        "mixed": (write_comparison_html(mixed, run, analysis, folder / "m.html"), None),
    }
    views = browser_views(list(paths.values()))
    return {name: (page, view) for (name, (page, _)), view in zip(paths.items(), views)}


def test_a_run_reads_as_a_run(pages):
    record = RunRecord.load(DATA / "records" / "run_v1.json")
    text = _terminal(render, record)
    assert text.startswith("torchdoctor ") and "slow_transform.py" in text.splitlines()[0]
    assert STOPPED in text and "5 warmup, 20 measured" in text
    for section in ("diagnosis", "step breakdown", "counterfactuals", "environment"):
        assert section in text, section
    page, view = pages["run"]
    assert_offline(view, page)
    title, said = _page_headline(view)
    assert title.startswith("torchdoctor: ") and "slow_transform.py" in title
    assert STOPPED in said
    assert {"verdict", "steps", "counterfactuals", "environment"} <= set(view["ids"])
    # One bar per measured step, drawn from the run's own parts.
    steps = {t.split(":")[0] for t in view["extra"]["steps"]}
    assert len(steps) == record.measured_steps
    assert any(": data_wait " in t for t in view["extra"]["steps"])


def test_a_job_reads_as_a_job_with_each_ranks_verdict(pages):
    job = combine([rank_record(0, 0.1, 45.0, 4.0), rank_record(1, 40.0, 3.0, 44.0)])
    text = _terminal(render, job)
    assert "job: 2 ranks on 1 node(s)" in text and "straggler: rank 1" in text
    page, view = pages["job"]  # the same job's page
    assert_offline(view, page)
    assert {"verdict", "ranks", "steps"} <= set(view["ids"])
    assert "rank 1 is a straggler" in view["text"]
    # Each rank's own verdict, as the terminal's ranks table gives it.
    rows = [line for line in view["text"].splitlines() if re.match(r"^[01]\t", line)]
    assert len(rows) == 2 and "COMPUTE-BOUND" in rows[0] and "INPUT-BOUND" in rows[1], rows
    assert "waits for rank 1" in rows[0] and "waits for rank 1" in text
    assert "COMPUTE-BOUND" in text  # the terminal says it too


def test_an_analysis_reads_as_a_trace_in_the_terminal(analysis, tmp_path):
    path = analysis.save(tmp_path / "an.json")
    for text in (_terminal(render, RunRecord.load(path)), _report(path)):
        first = text.splitlines()[0]
        assert first.startswith("torchdoctor analyze: 1 trace file(s), rank 0"), first
        assert "median step 221.1 ms over 2 steps" in first
        assert STOPPED not in text and "torchdoctor torchdoctor" not in text
        assert "model alone" not in text  # no counterfactual of a script that never ran
        for section in ("VERDICT: HOST-BOUND", "Step time, claimed", "GPU time over the kernel"):
            assert section in text, section


def _report(path) -> str:
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(path)]) == 0
    return out.getvalue()


def test_an_analysis_page_shows_the_traces_own_steps_and_parts(analysis, pages):
    page, view = pages["analysis"]
    assert_offline(view, page)
    title, said = _page_headline(view)
    assert title == f"torchdoctor: analyze {TRACE}", title
    assert said.startswith("a profiler trace: 1 trace file(s), rank 0"), said
    assert STOPPED not in view["text"] and "model alone" not in view["text"]
    assert {"verdict", "steps", "trace", "findings"} <= set(view["ids"])
    assert "counterfactuals" not in view["ids"]
    # The bars are the analysed steps, by the trace's own parts, never all "other".
    bars = view["extra"]["steps"]
    rank = analysis.trace.ranks[0]
    assert (
        {t.split(":")[0] for t in bars}
        == {"step 1", "step 2"}
        == {f"step {i + 1}" for i in range(rank.analysed_steps)}
    )
    drawn = {t.split(": ")[1].rsplit(" ", 2)[0] for t in bars}
    assert {"cpu_ops", "gpu_kernels"} <= drawn, drawn
    # The part table says what the terminal's step table says, number for number.
    terminal = _terminal(render, analysis)
    for part in ("CPU ops", "GPU kernels", "CUDA/HIP runtime", "wall time"):
        row = re.search(rf"^{re.escape(part)}\t(\S+)\t(\S+)$", view["text"], re.M)
        assert row, part
        assert re.search(rf"{re.escape(part)}\s+│\s+{re.escape(row[1])} │\s+{row[2]}", terminal)


def test_a_comparison_reads_as_one(analysis, pages):
    a = RunRecord.load(DATA / "records" / "run_v1.json")
    result = compare(a, a)
    text = _terminal(render_comparison, result)
    assert text.startswith("NO CHANGE 1.00x"), text
    page, view = pages["comparison"]  # the page of compare(a, a)
    assert_offline(view, page)
    title, said = _page_headline(view)
    assert title == "torchdoctor compare" and said.startswith("NO CHANGE"), (title, said)
    assert "judgement" in view["ids"] and view["ids"].count("verdict") == 2
    # Unlike records are said to be so, on the page as in the terminal.
    mixed = compare(a, analysis)
    assert "different kinds of record" in _terminal(render_comparison, mixed)
    _, view = pages["mixed"]  # the page of compare(a, analysis)
    assert "different kinds of record" in view["text"] and STOPPED in view["text"]
    assert view["text"].count(STOPPED) == 1  # A's run, not B's analysis
    assert "torchdoctor: B: analyze " in view["text"] and "torchdoctor analyze" not in view["text"]
