"""`--json -`: the record on stdout and nothing else there (the report, progress, and what the
script prints go to stderr), for `run`, `fix`, `compare` and `analyze`, and on an interrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from paths import DATA, HTA_TRACES
from shared_runs import torchdoctor

pytestmark = pytest.mark.integration

#: A script that prints to stdout at every step, as training scripts do.
CHATTY = textwrap.dedent(
    """
    import sys, time
    import torch
    slow = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(100000):
        print(f"hello from step {step}", flush=True)
        time.sleep(slow)
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)


def test_run_and_fix_write_only_the_record_on_stdout(tmp_path):
    (tmp_path / "train.py").write_text(CHATTY)
    quick = ["--steps", "3", "--warmup", "1", "--no-counterfactuals", "--json", "-"]
    run = torchdoctor("run", *quick, "--", "train.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads(run.stdout)  # the whole of stdout is one JSON document
    assert record["status"] == "complete" and record["measured_steps"] == 3
    assert "hello from step" in run.stderr and "Verdict" in run.stderr
    assert "run record written to standard output" in run.stderr
    assert not list(tmp_path.glob("*.json")), "no file named '-' or otherwise is left"
    fix = torchdoctor("fix", *quick, "--", "train.py", cwd=tmp_path)
    assert fix.returncode == 0, fix.stderr[-3000:]
    assert json.loads(fix.stdout)["patch"] is not None
    assert "hello from step" in fix.stderr


def test_compare_and_analyze_write_only_their_records_on_stdout(tmp_path):
    run = str(DATA / "records" / "run_v2.json")
    compared = torchdoctor("compare", run, run, "--json", "-", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["kind"] == "NO CHANGE"
    assert "comparison written to standard output" in compared.stderr
    trace = next(HTA_TRACES.rglob("*.json.gz"))
    analyzed = torchdoctor("analyze", str(trace), "--json", "-", cwd=tmp_path)
    assert analyzed.returncode == 0, analyzed.stderr
    assert json.loads(analyzed.stdout)["trace"]["files"]
    assert "torchdoctor analyze:" in analyzed.stderr  # the report, on stderr


def test_an_interrupted_run_still_writes_its_record_on_stdout(tmp_path):
    (tmp_path / "train.py").write_text(CHATTY)
    command = [sys.executable, "-m", "torchdoctor", "run", "--steps", "100000", "--warmup", "1",
               "--json", "-", "--", "train.py", "0.05"]  # fmt: skip
    proc = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    seen = ""
    while "measuring steps" not in seen and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    assert "measuring steps" in seen, seen[-2000:]
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    record = json.loads(out)
    assert record["status"] == "interrupted" and record["measured_steps"] > 0


def test_the_record_goes_to_a_file_stdout_is_redirected_to(tmp_path):
    # `torchdoctor run --json - ... > run.json`: stdout is a regular (seekable) file
    (tmp_path / "train.py").write_text(CHATTY)
    with open(tmp_path / "run.json", "w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "torchdoctor", "run", "--steps", "3", "--warmup", "1",
             "--no-counterfactuals", "--json", "-", "--", "train.py"],
            cwd=tmp_path, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "hello from step" in done.stderr
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "complete"
