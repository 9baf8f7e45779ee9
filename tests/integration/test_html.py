"""The HTML report and ``compare``, for real: pages rendered by Debian's chromium (headless,
driven by Playwright; no browser download), runs compared on the same script and on an injected
2x change, and the ``--timeline`` trace checked against the record it comes with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from paths import HTA_TRACES, SCENARIOS
from torchdoctor.analysis.compare import IMPROVED, NO_CHANGE, REGRESSED, compare
from torchdoctor.analysis.trace_analysis import analyze_trace
from torchdoctor.cli import main
from torchdoctor.record import RunRecord
from torchdoctor.report.compare import write_comparison_html
from torchdoctor.report.html import write_html

pytestmark = pytest.mark.integration

LOOP = str(SCENARIOS / "train_loop.py")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: The sections every diagnosis page of a run with a loader doctor has.
RUN_SECTIONS = ("verdict", "steps", "counterfactuals", "sweep", "transforms", "memory",
                "findings", "environment")  # fmt: skip


def browser_view(path: Path) -> dict:
    """Open ``path`` in headless chromium: the ids of its sections, its text, console messages
    and every request the page made."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            console, requests = [], []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.resolve().as_uri())
            ids = page.eval_on_selector_all("section[id]", "els => els.map(e => e.id)")
            text = page.inner_text("body")
            charts = page.eval_on_selector_all("svg.chart", "els => els.length")
            wide = page.evaluate("document.documentElement.scrollWidth")
        finally:
            browser.close()
    return {"ids": ids, "text": text, "console": console, "requests": requests,
            "charts": charts, "width": wide}  # fmt: skip


def assert_offline(view: dict, path: Path) -> None:
    assert view["console"] == [], view["console"]
    assert view["requests"] == [path.resolve().as_uri()], "the page asked for something else"
    assert view["width"] <= 1280, "wider than a laptop screen"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same input-bound loop twice (2 ms per sample), and once with samples twice as slow."""
    tmp = tmp_path_factory.mktemp("runs")
    out = {}
    for name, ms in (("a", "2"), ("a2", "2"), ("slow", "4")):
        path = tmp / f"{name}.json"
        status = main(["run", "--quiet", "--steps", "12", "--warmup", "2", "--json", str(path),
                       "--timeline", str(tmp / f"{name}.timeline.json"), "--",
                       LOOP, "--getitem-ms", ms])  # fmt: skip
        assert status == 0
        out[name] = path
    return out


def test_a_run_page_has_every_section_and_asks_for_nothing(runs, tmp_path):
    record = RunRecord.load(runs["a"])
    page = write_html(record, tmp_path / "run.html")
    assert page.stat().st_size < 3_000_000
    view = browser_view(page)
    assert_offline(view, page)
    assert all(s in view["ids"] for s in RUN_SECTIONS), view["ids"]
    assert record.verdict.kind in view["text"] and "Why" in view["text"]
    assert view["charts"] >= 4  # steps, counterfactuals, sweep, transforms (and memory)


def test_report_html_from_the_command_line(runs, tmp_path, capsys):
    out = tmp_path / "from_cli.html"
    assert main(["report", "--html", str(out), str(runs["a"])]) == 0
    assert str(out) in capsys.readouterr().out
    assert "INPUT-BOUND" in out.read_text()


def test_an_analyze_page_has_its_trace_section(tmp_path):
    trace = sorted(HTA_TRACES.glob("**/*.json*"))[0]
    record = analyze_trace([str(trace)], command=["torchdoctor", "analyze", str(trace)])
    page = write_html(record, tmp_path / "analyze.html")
    view = browser_view(page)
    assert_offline(view, page)
    assert "trace" in view["ids"] and "verdict" in view["ids"]


def test_a_job_page_shows_its_ranks_and_trials(tmp_path):
    from jobgen import rank_record
    from torchdoctor.analysis.distributed import combine

    job = combine([rank_record(0, 0.1, 45.0, 4.0), rank_record(1, 40.0, 3.0, 44.0)])
    page = write_html(job, tmp_path / "job.html")
    view = browser_view(page)
    assert_offline(view, page)
    assert "ranks" in view["ids"] and "rank 1 is a straggler" in view["text"]


def test_the_same_script_twice_is_no_change(runs):
    result = compare(RunRecord.load(runs["a"]), RunRecord.load(runs["a2"]))
    assert result.kind == NO_CHANGE, result


def test_an_injected_2x_change_is_improved_one_way_and_regressed_the_other(runs, tmp_path):
    slow, fast = RunRecord.load(runs["slow"]), RunRecord.load(runs["a"])
    better = compare(slow, fast)
    assert better.kind == IMPROVED and 1.5 < better.speedup < 2.5, better
    assert better.interval[0] > 1.0
    assert compare(fast, slow).kind == REGRESSED
    out = tmp_path / "c.json"
    assert main(["compare", str(runs["slow"]), str(runs["a"]), "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["kind"] == IMPROVED and written["speedup"] == better.speedup
    assert len(written["interval"]) == 2
    page = write_comparison_html(better, slow, fast, tmp_path / "c.html")
    view = browser_view(page)
    assert_offline(view, page)
    assert "judgement" in view["ids"] and IMPROVED in view["text"]
    assert view["text"].count("INPUT-BOUND") >= 2  # both diagnoses on the page


def test_the_timeline_holds_every_measured_part(runs):
    record = RunRecord.load(runs["a"])
    trace = json.loads(Path(str(runs["a"]).replace(".json", ".timeline.json")).read_text())
    events = trace["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"phases", "steps", "data wait", "forward", "backward", "optimizer"} <= tracks
    phases = [e["name"] for e in events if e.get("cat") == "phase"]
    assert phases[:2] == ["measure", "model-alone"]
    measured = [e for e in events if e.get("cat") == "step" and e["name"].startswith("measure ")]
    assert len(measured) == record.measured_steps
    # The data wait spans of the measured steps add up to the record's data wait.
    first, last = measured[0]["ts"], measured[-1]["ts"] + measured[-1]["dur"]
    waits = sum(
        e["dur"] for e in events
        if e.get("cat") == "part" and e["name"] == "data_wait" and first <= e["ts"] < last
    )  # fmt: skip
    assert waits / 1000 == pytest.approx(sum(record.steps.data_wait_ms), rel=0.01)


def test_analyze_records_compare_too():
    from torchdoctor.analysis.compare import step_times

    for trace in sorted(HTA_TRACES.glob("**/*.json*")):
        a = analyze_trace([str(trace)], command=["analyze", str(trace)])
        if len(step_times(a)) >= 2:
            break
    else:
        pytest.fail("no checked-in trace has two steps")
    b = analyze_trace([str(trace)], command=["analyze", str(trace)])
    result = compare(a, b)
    assert result.kind == NO_CHANGE and result.speedup == 1.0 and result.a_steps >= 2


def test_the_demo_writes_its_page_and_prints_where(tmp_path, capsys):
    pytest.importorskip("PIL")
    page = tmp_path / "demo.html"
    assert main(["demo", "--steps", "6", "--html", str(page)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert str(page.resolve()) in out
    view = browser_view(page)
    assert_offline(view, page)
    assert "IMPROVED" in view["text"] and "COMPUTE-BOUND" in view["text"]
