"""Workers with threads: on a CPU model the in-loop sweep searches the main process's thread count
with the worker count, `--fix` sets both, and the script's own thread count always comes back."""

from __future__ import annotations

import textwrap

import pytest
import torch

from paths import SCENARIOS
from torchdoctor.loader import fix_settings, fix_threads
from torchdoctor.options import RunOptions
from torchdoctor.process import Target, run_target, verify_fix

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timing,
    pytest.mark.skipif(torch.get_num_threads() < 2, reason="one thread: nothing to search"),
]

CPU_TRANSFORM = str(SCENARIOS / "cpu_transform.py")


def test_the_sweep_picks_fewer_threads_and_the_fix_sets_both():
    own = torch.get_num_threads()
    # Per sample 1 ms of CPU and 3 ms of waiting: the workers' gain holds on a loaded machine.
    # Whether the model's second thread helps or hurts beside busy workers is the machine's
    # (0.79x its step on 1 thread on the 2-core development machine with 1024-wide layers; CI's
    # probe once measured the model 3x faster on 2): the contention is injected instead, 30 ms
    # of waiting per step per thread beyond the first.
    argv = ["--transform-ms", "1", "--wait-ms", "3", "--thread-tax-ms", "30"]
    target = Target(script=CPU_TRANSFORM, argv=argv)
    options = RunOptions(steps=8, warmup=2)
    record = run_target(target, options).record
    assert torch.get_num_threads() == own
    assert record.verdict.kind == "INPUT-BOUND", record.verdict
    sweep = record.loader_report.worker_sweep
    assert sweep.measures == "step" and sweep.default_threads == own
    assert all(p.threads is not None for p in sweep.points)
    # The probe (the model alone on its threads and on 1) finds 1 thread keeps up: the pick has 1.
    assert [p.threads for p in sweep.threads_probe] == [own, 1]
    assert sweep.threads_probe[1].batches_per_s > sweep.threads_probe[0].batches_per_s
    assert sweep.best_threads < own, (sweep.threads_probe, sweep.points)
    assert len(sweep.points) < len(sweep.candidates) * own  # not the whole grid
    setting = next(
        f for f in record.findings if f.kind in ("loader.num_workers", "loader.num_threads")
    )
    assert f"torch.set_num_threads({sweep.best_threads}) at the start" in setting.title
    assert fix_threads(record.findings) == sweep.best_threads

    trial = verify_fix(target, options, record, quiet=True)
    assert trial.threads == sweep.best_threads
    assert trial.overrides == fix_settings(record.findings)
    assert trial.after.threads_override == trial.threads
    assert trial.after.loader.num_workers == trial.overrides.get("num_workers", 0)
    assert f"torch.set_num_threads({trial.threads})" in trial.code
    assert trial.verified.speedup > 1.2, (trial.verified, sweep.points)
    assert torch.get_num_threads() == own


SCRIPT_ENDING_IN_THE_SWEEP = textwrap.dedent(
    """
    import sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            time.sleep(0.004)
            return torch.full((8,), float(i))

    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    own = torch.get_num_threads()
    loader = DataLoader(Slow(), batch_size=4)
    for x in loader:
        if torch.get_num_threads() != own:  # a trial of the sweep set its threads
            if sys.argv[1] == "raise":
                raise RuntimeError("the script failed during the sweep")
            break
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    """
)


@pytest.mark.parametrize(("ending", "status"), [("raise", "script-error"), ("return", "partial")])
def test_a_script_ending_during_the_sweep_gets_its_threads_back(tmp_path, ending, status):
    script = tmp_path / "ends_in_the_sweep.py"
    script.write_text(SCRIPT_ENDING_IN_THE_SWEEP)
    own = torch.get_num_threads()
    out = run_target(Target(script=str(script), argv=[ending]), RunOptions(steps=3, warmup=1))
    assert out.record.status == status, out.record.notes
    assert out.record.loader_report is None  # it ended inside the sweep
    assert torch.get_num_threads() == own


def test_a_fix_rerun_holds_its_threads_against_the_scripts_own_call(tmp_path):
    seen = tmp_path / "threads.txt"
    script = tmp_path / "sets_threads.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            torch.set_num_threads(2)
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            with open({str(seen)!r}, "w") as out:
                for epoch in range(100):
                    for (x,) in DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4):
                        out.write(f"{{torch.get_num_threads()}}\\n")
                        model(x).sum().backward()
                        opt.step()
                        opt.zero_grad()
            """
        )
    )
    own = torch.get_num_threads()
    options = RunOptions(steps=3, warmup=1, counterfactuals=False, threads_override=1)
    out = run_target(Target(script=str(script)), options)
    assert out.exit_status == 0, out.record.notes
    assert set(seen.read_text().split()) == {"1"}
    assert out.record.threads_override == 1
    assert any("torch.set_num_threads(2) was not applied" in n for n in out.record.notes)
    assert torch.get_num_threads() == own
