"""`--fix` and `torchdoctor loader`: the loader doctor inside a run, and the verified re-run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from paths import SCENARIOS
from torchdoctor.loader import fix_settings
from torchdoctor.options import RunOptions
from torchdoctor.process import Target, run_target, verify_fix
from torchdoctor.record import FixTrial, RunRecord

#: The tests marked timing: their verdicts, speedups and picks come from measured durations
#: (`make test-load` runs them beside a busy process); the rest assert what no load changes.
pytestmark = pytest.mark.integration

LOOP = str(SCENARIOS / "train_loop.py")


@pytest.mark.timing
def test_fix_names_the_costly_transform_and_verifies_the_speedup(cpu_hog):
    # 64 batches an epoch: with 16, each worker count's few counted steps held the restart of
    # its clone's workers at the epoch's end, which the re-run's window did not.
    target = Target(script=LOOP, argv=["--transform-ms", "12", "--dataset-len", "256"])
    options = RunOptions(steps=6, warmup=2)
    record = run_target(target, options).record
    assert record.verdict.kind == "INPUT-BOUND"
    # The Compose's second transform holds the cost.
    report = record.loader_report
    costliest = max(report.transforms, key=lambda t: t.share)
    assert costliest.name.startswith("SlowResize"), report.transforms
    sweep = report.worker_sweep
    assert sweep.measures == "step" and sweep.best_workers > 0
    # The doctor's memory figures are for the worker count the whole-step sweep picked.
    assert report.memory.num_workers == sweep.best_workers
    overrides = fix_settings(record.findings)
    assert overrides["num_workers"] == sweep.best_workers

    trial = verify_fix(target, options, record, quiet=True)
    assert isinstance(trial, FixTrial) and record.fix is trial
    assert trial.overrides == overrides
    assert trial.verified.speedup > 1.4  # 48 ms of sleep per batch spread over >= 2 workers
    assert trial.predicted_speedup > 1.4
    # The whole-step sweep's prediction and the re-run agree (throughput ratios, same run) on a
    # quiet machine. Beside a busy loop they need not: the sweep measures its worker counts one
    # after another, not side by side as the re-run is, and a CI run predicted 8.95x where the
    # alternated re-run verified 2.40x (the sweep's own weakness, not the re-run's).
    if cpu_hog is None:
        assert trial.verified.speedup == pytest.approx(trial.predicted_speedup, rel=0.4)
    assert trial.after.loader.num_workers == overrides["num_workers"]
    assert trial.after.loader_overrides == overrides
    assert trial.where.endswith("train_loop.py:" + trial.where.rsplit(":", 1)[1])
    assert "DataLoader(..., num_workers=" in trial.code


def test_injected_overrides_win_over_positional_arguments(tmp_path):
    script = tmp_path / "positional.py"
    script.write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "ds = TensorDataset(torch.randn(64, 4))\n"
        "loader = DataLoader(ds, 8, True, None, None, 0)  # num_workers=0, positionally\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(50):\n"
        "    for (x,) in loader:\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        "        opt.zero_grad()\n"
    )
    out = run_target(
        Target(script=str(script)),
        RunOptions(
            steps=3,
            warmup=1,
            counterfactuals=False,
            loader_overrides={"num_workers": 1, "persistent_workers": True},
        ),
    )
    assert out.exit_status == 0, out.record.notes
    assert out.record.loader.num_workers == 1 and out.record.loader.persistent_workers
    assert out.record.loader.created_at.endswith("positional.py:4")


def test_injecting_zero_workers_into_a_persistent_loader_resets_its_worker_arguments(tmp_path):
    script = tmp_path / "persistent.py"
    script.write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "ds = TensorDataset(torch.randn(64, 4))\n"
        "loader = DataLoader(ds, 8, num_workers=1, persistent_workers=True, prefetch_factor=3)\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(50):\n"
        "    for (x,) in loader:\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        "        opt.zero_grad()\n"
    )
    out = run_target(
        Target(script=str(script)),
        RunOptions(steps=3, warmup=1, counterfactuals=False, loader_overrides={"num_workers": 0}),
    )
    assert out.exit_status == 0, out.record.notes
    loader = out.record.loader
    assert loader.num_workers == 0 and not loader.persistent_workers
    assert loader.prefetch_factor is None
    assert out.record.loader_overrides == {"num_workers": 0}


@pytest.mark.timing
def test_loader_command_always_runs_the_doctor(tmp_path):
    path = tmp_path / "loader.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchdoctor",
            "loader",
            "--steps",
            "4",
            "--warmup",
            "1",
            "--json",
            str(path),
            LOOP,
            "--forward-ms",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    record = RunRecord.load(path)
    assert record.verdict.kind == "COMPUTE-BOUND"
    sweep = record.loader_report.worker_sweep
    assert sweep.points, "the sweep ran although the run is compute-bound"
    assert "num_workers sweep" in res.stdout


@pytest.mark.timing
def test_fix_with_nothing_to_inject_says_so(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchdoctor",
            "run",
            "--fix",
            "--steps",
            "3",
            "--warmup",
            "1",
            LOOP,
            "--forward-ms",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "nothing to inject" in res.stdout
