"""The HTML report and ``compare``, for real: pages rendered by Debian's chromium (headless,
driven by Playwright; no browser download), runs compared on the same script and on an injected
2x change, and the ``--timeline`` trace checked against the record it comes with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from browser import assert_offline, browser_view
from paths import HTA_TRACES, SCENARIOS
from torchdoctor.analysis.compare import (
    IMPROVED,
    NO_CHANGE,
    REGRESSED,
    UNCLEAR,
    compare,
    load_doubt,
    others_cores,
    wait_doubt,
)
from torchdoctor.analysis.trace_analysis import analyze_trace
from torchdoctor.cli import main
from torchdoctor.record import RunRecord
from torchdoctor.report.compare import write_comparison_html
from torchdoctor.report.html import write_html

pytestmark = pytest.mark.integration

LOOP = str(SCENARIOS / "train_loop.py")
#: The sections every diagnosis page of a run with a loader doctor has.
RUN_SECTIONS = ("verdict", "steps", "counterfactuals", "sweep", "transforms", "memory",
                "findings", "environment")  # fmt: skip


def _run(path: Path, ms: str, *flags: str) -> Path:
    status = main(["run", "--quiet", *flags, "--json", str(path), "--", LOOP, "--getitem-ms", ms])
    assert status == 0
    return path


@pytest.fixture(scope="module")
def drawn(tmp_path_factory) -> Path:
    """The input-bound loop (20 ms per sample) measured in full, drawn on its page and its
    ``--timeline``: nothing is compared with it, so it needs no quiet machine."""
    tmp = tmp_path_factory.mktemp("drawn")
    timeline = ["--timeline", str(tmp / "a.timeline.json")]
    return _run(tmp / "a.json", "20", "--steps", "12", "--warmup", "2", *timeline)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same input-bound loop twice (20 ms per sample), and once with samples twice as slow.
    A first run, not compared, takes the cold start (file cache, imports): the first of two
    runs measured 1.10x slower than the second once, past the 10% allowance. The samples' sleep
    dominates the step even beside a busy process (`make test-load`): at 2 ms per sample the
    model's step, slowed by a CPU hog to about 37 ms, left the injected 2x at 1.14x.

    ``compare`` reads the measured steps and the verdicts, which the counterfactuals and the
    loader doctor after them do not change: every run is the same command without them ("a2" is
    "a" again, as the no-change test says); the cold start is over once the script has stepped
    (imports, file cache)."""
    tmp = tmp_path_factory.mktemp("runs")
    steps = ["--steps", "12", "--warmup", "2", "--no-counterfactuals"]
    _run(tmp / "cold.json", "20", "--steps", "2", "--warmup", "1", "--no-counterfactuals")
    return {
        name: _run(tmp / f"{name}.json", ms, *steps)
        for name, ms in (("a", "20"), ("a2", "20"), ("slow", "40"))
    }


def test_a_run_page_has_every_section_and_asks_for_nothing(drawn, tmp_path):
    record = RunRecord.load(drawn)
    page = write_html(record, tmp_path / "run.html")
    assert page.stat().st_size < 3_000_000
    view = browser_view(page)
    assert_offline(view, page)
    assert all(s in view["ids"] for s in RUN_SECTIONS), view["ids"]
    assert record.verdict.kind in view["text"] and "Why" in view["text"]
    assert view["charts"] >= 4  # steps, counterfactuals, sweep, transforms (and memory)


def test_report_html_from_the_command_line(drawn, tmp_path, capsys):
    out = tmp_path / "from_cli.html"
    assert main(["report", "--html", str(out), str(drawn)]) == 0
    assert str(out) in capsys.readouterr().out
    assert "INPUT-BOUND" in out.read_text()


@pytest.mark.timing
def test_the_same_script_twice_is_no_change(runs):
    a, a2 = RunRecord.load(runs["a"]), RunRecord.load(runs["a2"])
    result = compare(a, a2)
    # never a change; "could not tell" only where other processes' load differed between them,
    # or the training thread waited for cores in one more than the allowance could hide
    doubt = load_doubt(NO_CHANGE, others_cores(a), others_cores(a2)) or wait_doubt(
        NO_CHANGE, a, a2, 1.0, result.judged.allowance
    )
    assert result.kind == (UNCLEAR if doubt else NO_CHANGE), result


@pytest.mark.timing
def test_an_injected_2x_change_is_improved_one_way_and_regressed_the_other(runs, tmp_path):
    slow, fast = RunRecord.load(runs["slow"]), RunRecord.load(runs["a"])
    better = compare(slow, fast)
    assert better.kind == IMPROVED and 1.5 < better.judged.speedup < 2.5, better
    assert better.judged.low > 1.0
    assert compare(fast, slow).kind == REGRESSED
    out = tmp_path / "c.json"
    assert main(["compare", str(runs["slow"]), str(runs["a"]), "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["kind"] == IMPROVED and written["speedup"] == better.judged.speedup
    assert len(written["interval"]) == 2
    page = write_comparison_html(better, slow, fast, tmp_path / "c.html")
    view = browser_view(page)
    assert_offline(view, page)
    assert "judgement" in view["ids"] and IMPROVED in view["text"]
    assert view["text"].count("INPUT-BOUND") >= 2  # both diagnoses on the page


def test_the_timeline_holds_every_measured_part(drawn):
    record = RunRecord.load(drawn)
    trace = json.loads(Path(str(drawn).replace(".json", ".timeline.json")).read_text())
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
    assert result.kind == NO_CHANGE and result.judged.speedup == 1.0 and result.a_steps >= 2


@pytest.mark.timing  # its headline must be IMPROVED, measured side by side
def test_the_demo_writes_its_page_and_prints_where(tmp_path, capsys, cpu_hog):
    pytest.importorskip("PIL")
    page = tmp_path / "demo.html"
    assert main(["demo", "--steps", "6", "--html", str(page), "--json", str(tmp_path)]) == 0
    side = json.loads((tmp_path / "speedup.json").read_text())
    judged = side["judged"]["judgement"]
    assert len(side["pairs"]) == 2, side
    if cpu_hog is None:  # quiet: the fix's gain is clear in both pairs (3.19x from a fresh clone)
        assert judged == "IMPROVED" and min(side["pairs"]) > 1.0, side
    else:
        # beside a busy loop the two pipelines lose cores unlike (pairs of 1.08x and 1.58x were
        # measured; beside two test workers 0.41x): IMPROVED, or could not tell and said so ("a
        # quieter moment"), never a firm other answer
        assert judged == "IMPROVED" or (
            judged == "UNCLEAR" and "quieter moment" in side["notes"][0]
        ), side
    out = " ".join(capsys.readouterr().out.split())
    assert str(page.resolve()) in out
    # the table's mean steps are the side-by-side runs', not the diagnoses' minutes apart
    steps = side["mean_step_ms"]
    assert f"{steps['before']:.1f} ms {steps['after']:.1f} ms" in out.replace("│ ", ""), out
    assert "mean step (each script's runs pooled) and speedup (their pairs' own" in out
    view = browser_view(page)
    assert_offline(view, page)
    assert judged in view["text"] and "COMPUTE-BOUND" in view["text"]
    # its speedup is measured side by side, and the page does not warn against its own story
    assert "measured side by side" in view["text"]
    assert "like-for-like" not in view["text"] and "different scripts" not in view["text"]
    # step 2, `torchdoctor fix`: the seed-004 loss's three round-trips rewritten, each checked
    assert "patch" in view["ids"] and view["text"].count("same losses over 4 steps") == 3


def test_a_closed_pipe_loses_the_comparisons_text_not_its_files(drawn, tmp_path):
    # `torchdoctor compare A B --json OUT | head -1`: the report met the closed pipe first and
    # the files were never written
    import subprocess
    import sys

    out, page = tmp_path / "c.json", tmp_path / "c.html"
    cmd = [sys.executable, "-m", "torchdoctor", "compare", str(drawn), str(drawn),
           "--json", str(out), "--html", str(page)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()  # like `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode(errors="replace")
    proc.wait(timeout=120)
    assert "Traceback" not in err, err
    assert json.loads(out.read_text())["kind"] == NO_CHANGE and page.exists()
