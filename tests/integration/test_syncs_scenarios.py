"""The sync finder under `torchdoctor run` on real scripts: a nanoGPT-style loop that builds its
own batches, a CPU-only script that never moves them, and a Hugging Face Trainer."""

from __future__ import annotations

import pytest

from paths import SCENARIOS
from torchdoctor.options import RunOptions
from torchdoctor.process import Target, run_target

pytestmark = pytest.mark.integration


def sync_findings_of(script, *argv: str):
    record = run_target(
        Target(script=str(script), argv=list(argv)),
        RunOptions(steps=2, warmup=1, counterfactuals=False),
    ).record
    assert record.status == "complete" and record.sync_sampled_steps == 2
    return [f for f in record.findings if f.file]


def marked(script, marker: str = "# expect: ") -> set[tuple[str, int]]:
    lines = script.read_text().splitlines()
    return {(t.split(marker)[1].strip(), n) for n, t in enumerate(lines, 1) if marker in t}


def test_a_gpt_loop_that_builds_its_own_batches_has_no_copy_findings(tmp_path):
    # Before: both `torch.stack([torch.from_numpy(...) for i in ix])` lines were reported as
    # "tensor built from Python data" (the batch of the next step is built in this one).
    assert sync_findings_of(SCENARIOS / "gpt_memmap.py", "--data", str(tmp_path)) == []


def test_a_cpu_only_script_that_never_moves_its_batches_gets_its_syncs_found():
    script = SCENARIOS / "cpu_only.py"
    found = sync_findings_of(script, "--checks")
    assert {(f.kind, f.line) for f in found} == marked(script)
    assert all(f.calls_per_step == 1.0 and "on an accelerator" in f.title for f in found)
    assert sync_findings_of(script) == []


def test_a_hugging_face_trainer_sync_names_the_trainer_line_and_its_setting(hf_trainer_run):
    # In a child process: transformers patches and caches more than the hygiene check allows.
    # The run is shared with test_loader_batch_size (tests/shared_runs.py).
    script, done = hf_trainer_run.script, hf_trainer_run.done
    assert done.returncode == 0, done.stderr[-2000:]
    findings = [f for f in hf_trainer_run.record["findings"] if f.get("file")]
    user_line = next(
        n for n, t in enumerate(script.read_text().splitlines(), 1) if "trainer.train()" in t
    )
    assert findings and all(f["line"] == user_line for f in findings)
    assert all(f["detail"]["library"] == "transformers" for f in findings)
    nan_check = [f for f in findings if "logging_nan_inf_filter" in f["fix"]]
    assert len(nan_check) == 1, [(f["detail"]["via"], f["fix"]) for f in findings]
    (via,) = nan_check[0]["detail"]["via"]
    assert "/transformers/trainer.py:" in via
    assert nan_check[0]["calls_per_step"] == 2.0  # torch.isnan(loss) or torch.isinf(loss)
    assert "logging_nan_inf_filter" in done.stdout and "from your line" in done.stdout
