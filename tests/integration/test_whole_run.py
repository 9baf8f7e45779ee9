"""``torchdoctor run --whole`` on a script with costs of known size outside its steps: each kind of
the accounts finds what was put there, the kinds sum to the wall time, and the record survives
every ending (the script's own end, Ctrl-C, SIGKILL of its process, the bound).

The costs are sleeps in the script's own functions (tests/scenarios/whole_run.py), big beside a
step; sleeps are never shorter than asked, and the upper bounds allow a busy machine its slack.
What stack samples attribute (the flush between steps) can lose the tail after its last sample to
the next step on a busy machine: beside a CPU hog 11 flushes of 150 ms came out 132 ms each, under
the 90% bound, so each flush sleeps 300 ms.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from browser import assert_offline, browser_view
from distjobs import wait_for_phase
from paths import SCENARIOS
from torchdoctor.analysis.compare import compare
from torchdoctor.process.child import WHOLE_INTERVAL_S
from torchdoctor.record import RunRecord

#: The tests marked timing: their verdicts, speedups and picks come from measured durations
#: (`make test-load` runs them beside a busy process); the rest assert what no load changes.
pytestmark = pytest.mark.integration

SCRIPT = SCENARIOS / "whole_run.py"
INDEX_S, INIT_S, EVAL_BATCHES, EVAL_S, SAVE_S, FLUSH_EVERY, FLUSH_S = (
    0.8,
    0.5,
    5,
    0.03,
    0.3,
    10,
    0.3,
)
EPOCHS, BATCHES = 3, 40
COSTS = [
    "--epochs", str(EPOCHS), "--batches", str(BATCHES), "--index-s", str(INDEX_S),
    "--workers", "2", "--init-s", str(INIT_S), "--eval-batches", str(EVAL_BATCHES),
    "--eval-s", str(EVAL_S), "--save-s", str(SAVE_S), "--flush-every", str(FLUSH_EVERY),
    "--flush-s", str(FLUSH_S),
]  # fmt: skip


def _command(tmp_path, *flags: str, script_args: list[str] = COSTS) -> tuple[list[str], object]:
    record = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "torchdoctor", "run", "--whole", "--json", str(record), *flags]
    cmd += ["--", str(SCRIPT), *script_args, "--out", str(tmp_path / "checkpoint.pt")]
    return cmd, record


def within(measured: float, injected: float, slack_s: float) -> bool:
    """At least 90% of what was injected, at most 110% and a busy machine's slack."""
    return 0.9 * injected <= measured <= 1.1 * injected + slack_s


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("whole")
    cmd, record = _command(
        tmp_path, "--html", str(tmp_path / "run.html"), "--timeline", str(tmp_path / "trace.json")
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(record.read_text()), done.stdout, tmp_path


def kinds(data: dict, kind: str) -> list[dict]:
    return [k for k in data["whole_run"]["categories"] if k["kind"] == kind]


@pytest.mark.timing
def test_the_kinds_sum_to_the_wall_time_and_goodput_is_the_steps_share(whole):
    data, _, _ = whole
    run = data["whole_run"]
    assert data["status"] == "complete" and run["ending"] == "ended"
    assert sum(k["seconds"] for k in run["categories"]) == pytest.approx(run["wall_s"], rel=0.01)
    steps = kinds(data, "steps")[0]
    assert run["steps"] == EPOCHS * BATCHES
    assert steps["count"] == run["steps"] - 1  # the first step ends the startup
    assert run["goodput"] == pytest.approx(steps["seconds"] / run["wall_s"], abs=1e-3)


@pytest.mark.timing
def test_startup_names_the_slow_indexing_function(whole):
    data, _, _ = whole
    startup = kinds(data, "startup")[0]
    part = next(p for p in startup["detail"].split("; ") if "(index_dataset)" in p)
    assert within(float(part.split()[-2]), INDEX_S, 0.3), startup


@pytest.mark.timing
def test_each_epoch_boundary_is_the_workers_start_and_persistent_workers_is_the_fix(whole):
    data, _, _ = whole
    boundary = kinds(data, "epoch-boundary")[0]
    assert boundary["count"] == EPOCHS - 1
    assert within(boundary["seconds"], (EPOCHS - 1) * INIT_S, 0.6), boundary
    assert "persistent_workers=True" in boundary["fix"]
    assert boundary["saves_s"] == pytest.approx(boundary["seconds"], abs=0.01)


@pytest.mark.timing
def test_evaluation_passes_are_counted_and_timed(whole):
    data, _, _ = whole
    evaluation = kinds(data, "evaluation")[0]
    assert evaluation["count"] == EPOCHS
    assert within(evaluation["seconds"], EPOCHS * EVAL_BATCHES * EVAL_S, 0.4), evaluation
    assert "whole_run.py:" in evaluation["where"]


@pytest.mark.timing
def test_a_save_function_counts_with_its_own_work_around_torch_save(whole):
    data, _, _ = whole
    checkpoint = kinds(data, "checkpoint")[0]
    assert checkpoint["count"] == EPOCHS
    assert within(checkpoint["seconds"], EPOCHS * SAVE_S, 0.4), checkpoint
    assert "async_save" in checkpoint["fix"]


@pytest.mark.timing
def test_a_metric_flush_between_steps_is_named_at_its_function(whole):
    data, _, _ = whole
    flush = [k for k in kinds(data, "between-steps") if "(flush_metrics)" in (k["where"] or "")]
    assert len(flush) == 1, kinds(data, "between-steps")
    # every 10th step flushes; the last flush comes after the last step (the tail)
    flushes_between = EPOCHS * BATCHES // FLUSH_EVERY - 1
    assert within(flush[0]["seconds"], flushes_between * FLUSH_S, 0.5), flush
    assert flush[0]["count"] >= flushes_between - 1


@pytest.mark.timing
def test_the_report_shows_the_whole_run(whole):
    data, stdout, _ = whole
    text = " ".join(stdout.split())
    assert "the whole run: where its" in text
    assert f"goodput {data['whole_run']['goodput']:.0%}" in text
    assert "persistent_workers=True" in text
    assert "watched the whole run" in text


#: For each kind on the page's bar, its segments' width over the bar's; the timeline's events.
_PAGE = """() => {
  const bar = document.querySelector('#whole-run svg.chart');
  const rects = [...bar.querySelectorAll('rect[class^="kind-"]')];
  const total = rects.reduce((s, r) => s + r.width.baseVal.value, 0);
  const share = {};
  for (const r of rects) { const k = r.getAttribute('class').slice(5);
    share[k] = (share[k] || 0) + r.width.baseVal.value / total; }
  const events = [...document.querySelectorAll('#whole-run rect.event')].map(
    r => r.getAttribute('class').split(' ')[1].slice(5));
  return {share, events, series: document.querySelectorAll('#whole-run path.series').length};
}"""


@pytest.mark.timing
def test_the_page_draws_each_kind_at_its_share_and_the_timeline_its_events(whole):
    data, _, tmp_path = whole
    page = tmp_path / "run.html"
    view = browser_view(page, _PAGE)
    assert_offline(view, page)
    assert view["ids"][0] == "whole-run" and "goodput" in view["text"]
    run = data["whole_run"]
    for kind in {k["kind"] for k in run["categories"]}:
        seconds = sum(k["seconds"] for k in run["categories"] if k["kind"] == kind)
        assert view["extra"]["share"].get(kind, 0.0) == pytest.approx(
            seconds / run["wall_s"], abs=0.01
        ), kind
    events = view["extra"]["events"]
    for kind, count in (("evaluation", EPOCHS), ("checkpoint", EPOCHS), ("epoch-boundary", 2)):
        assert events.count(kind) == count, (kind, events)
    assert view["extra"]["series"] == 1


@pytest.mark.timing
def test_the_timeline_has_the_whole_runs_track(whole):
    data, _, tmp_path = whole
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    spans = [e for e in trace if e.get("cat") == "whole"]
    assert {"startup", "evaluation", "checkpoint", "epoch-boundary"} <= {e["name"] for e in spans}
    assert len(spans) == len(data["whole_run"]["events"])


@pytest.mark.timing
def test_compare_judges_two_whole_runs_by_their_wall_time(whole):
    data, _, _ = whole
    a = RunRecord.from_dict(data)
    b = RunRecord.from_dict(data)
    b.whole_run.wall_s = a.whole_run.wall_s / 2  # the same run, in half the time
    change = compare(a, b).whole
    assert change is not None and change.kind == "IMPROVED" and change.speedup == pytest.approx(2)
    assert compare(b, a).whole.kind == "REGRESSED"
    assert compare(a, a).whole.kind == "NO CHANGE"
    assert [k[0] for k in change.kinds] == list(
        dict.fromkeys(k.kind for k in a.whole_run.categories)
    )


def _child_of(proc: subprocess.Popen, timeout_s: float = 60) -> psutil.Process:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = psutil.Process(proc.pid).children()
        if children:
            return children[0]
        time.sleep(0.1)
    raise AssertionError("the script's process never started")


LONG = ["--epochs", "200", "--batches", "20", "--step-s", "0.01"]


@pytest.mark.parametrize("ending", ["ctrl-c", "sigterm", "sigkill"])
def test_a_whole_run_cut_short_keeps_its_accounts(tmp_path, ending):
    counted = tmp_path / "steps"
    cmd, record = _command(tmp_path, script_args=[*LONG, "--count-file", str(counted)])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = _child_of(proc)
    # Into the steps, and one accounts message after the first (they stream every 5 s): a fixed
    # 9 s from the start was still in the startup beside a busy process (make test-load).
    wait_for_phase(proc, "watching the whole run")
    time.sleep(WHOLE_INTERVAL_S + 2.0)
    if ending == "sigkill":
        child.send_signal(signal.SIGKILL)
    else:  # SIGTERM: a scheduler's preemption of torchdoctor's command
        proc.send_signal(signal.SIGINT if ending == "ctrl-c" else signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    data = json.loads(record.read_text())
    assert data["status"] == ("killed" if ending == "sigkill" else "interrupted"), data["notes"]
    run = data["whole_run"]
    assert run["ending"] == "cut" and run["steps"] > 0
    if ending != "sigkill":  # the accounts go to the last step, not to the last sent (every 5 s)
        taken = int(counted.read_text())
        assert taken - 2 <= run["steps"] <= taken + 1, (run["steps"], taken)
    assert sum(k["seconds"] for k in run["categories"]) == pytest.approx(run["wall_s"], rel=0.01)
    assert run["projected_goodput"] is not None and run["projection"]
    assert "Traceback" not in err


@pytest.mark.timing
def test_the_bound_ends_a_whole_run_and_keeps_its_accounts(tmp_path):
    cmd, record = _command(tmp_path, "--max-seconds", "8", script_args=LONG)
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 8 + 15
    data = json.loads(record.read_text())
    assert data["status"] == "timed-out", data["notes"]
    assert data["whole_run"]["ending"] == "cut"
    assert "whole run" in " ".join(done.stdout.split())


@pytest.mark.timing
def test_a_job_whose_rank_0_saves_counts_the_wait_as_every_ranks_checkpoint(tmp_path):
    record = tmp_path / "job.json"
    cmd = [sys.executable, "-m", "torchdoctor", "run", "--whole", "--quiet", "--nproc-per-node",
           "2", "--json", str(record), "--", str(SCENARIOS / "whole_ddp.py"), "--save-s", "0.4",
           "--out", str(tmp_path / "checkpoint.pt")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(record.read_text())
    ranks = {r["rank"]: r for r in data["distributed"]["ranks"]}
    saves = kinds(data, "checkpoint")[0]["count"]  # 64 steps a rank, one save every 20
    assert saves == 3
    for rank in (0, 1):
        assert ranks[rank]["goodput"] is not None
        assert within(ranks[rank]["whole_s"]["checkpoint"], saves * 0.4, 0.4), ranks[rank]
    assert "goodput by rank" in " ".join(done.stdout.split())


def _whole_of(tmp_path, script: str, *args: str) -> dict:
    record = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "torchdoctor", "run", "--whole", "--quiet", "--json",
           str(record), "--", str(SCENARIOS / script), *args]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(record.read_text())
    run = data["whole_run"]
    assert sum(k["seconds"] for k in run["categories"]) == pytest.approx(run["wall_s"], rel=0.01)
    return data


@pytest.mark.timing
def test_lightning_validation_and_checkpoints(tmp_path):
    if importlib.util.find_spec("pytorch_lightning") is None:  # not imported here: it wraps
        pytest.skip("pytorch_lightning is not installed")  # torch.compile when imported
    data = _whole_of(tmp_path, "whole_lightning.py", "--val-batch-s", "0.06", "--save-s", "0.3")
    evaluation, checkpoint = kinds(data, "evaluation")[0], kinds(data, "checkpoint")[0]
    assert evaluation["count"] == 3 and checkpoint["count"] == 3
    assert within(evaluation["seconds"], 3 * 5 * 0.06, 0.4), evaluation
    # the LightningModule's on_save_checkpoint, called by Lightning's save functions
    assert within(checkpoint["seconds"], 3 * 0.3, 0.4), checkpoint
    assert data["whole_run"]["steps"] == 3 * 40


def test_hugging_face_trainer_evaluation_and_save_steps(tmp_path):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    data = _whole_of(
        tmp_path, "hf_trainer.py", "--max-steps", "30", "--eval-steps", "10", "--save-steps", "10"
    )
    assert kinds(data, "evaluation")[0]["count"] == 3
    assert kinds(data, "checkpoint")[0]["count"] == 3
    assert data["whole_run"]["steps"] == 30


def test_whole_refuses_what_would_change_the_run(tmp_path):
    for flags in (["--fix"], ["--try", "amp"], ["--trace", str(tmp_path)]):
        cmd, _ = _command(tmp_path, *flags)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "--whole watches the run without changing it" in done.stderr
        assert "Traceback" not in done.stderr
