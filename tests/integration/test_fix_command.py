"""`torchdoctor fix` end to end: the diagnosis, the patch at the place each setting lives, the
patched code measured against the original, `git apply`, `--apply` and its backup."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from browser import assert_offline, browser_view
from paths import SCENARIOS
from shared_runs import torchdoctor
from torchdoctor.record import JUDGEMENTS, RunRecord

pytestmark = pytest.mark.integration


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*.py"))
    }


@pytest.mark.timing
def test_the_patch_of_a_loader_in_another_module_is_measured_and_applies(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(SCENARIOS / "fix_project", project)
    before = _digest(project)
    out = torchdoctor(
        "fix", "--steps", "6", "--warmup", "2", "--quiet", "--json", "fix.json",
        "--html", "fix.html", "--out", "fix.diff", "--", "train.py",
        cwd=project,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert _digest(project) == before, "fix without --apply changed the user's files"
    record = RunRecord.load(project / "fix.json")
    patch = record.patch
    loader = next(r for r in patch.remedies if r.key.startswith("loader"))
    # 40 ms of sleep per batch, spread over the workers the sweep picked
    assert loader.kept and loader.judged.judgement == "IMPROVED" and loader.judged.speedup > 1.4
    assert loader.judged.low > 1.0
    # WORKERS is a module constant of data.py: changed there, not at the call in train.py
    assert any(c.file == "data.py" and c.what.startswith("WORKERS = 0 → ") for c in loader.changes)
    diff = (project / "fix.diff").read_text()
    assert diff == patch.diff and "--- a/data.py\n+++ b/data.py\n" in diff
    assert patch.judged.judgement == "IMPROVED" and patch.after_ms < patch.before_ms
    for remedy in patch.remedies:
        assert remedy.kept == (remedy.judged.judgement == "IMPROVED"), remedy
        assert remedy.kept or remedy.reason
    check = subprocess.run(
        ["git", "apply", "--check", "fix.diff"], cwd=project, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    assert "The patch:" in out.stdout
    # The page shows the patch: each remedy's figure, and the diff with its lines.
    view = browser_view(project / "fix.html", "() => [...document.querySelectorAll("
                        "'#patch pre.diff .add')].map(e => e.textContent)")  # fmt: skip
    assert_offline(view, project / "fix.html")
    assert "patch" in view["ids"] and f"{loader.judged.speedup:.2f}x" in view["text"]
    assert any(line.startswith("+WORKERS = ") for line in view["extra"])
    assert view["width"] <= 1280
    assert (
        f"patch written to {project / 'fix.diff'} (apply it: cd {project} && git apply"
        in out.stdout
    )


@pytest.mark.timing
def test_apply_writes_the_patch_keeps_a_backup_and_the_patched_script_is_faster(
    applied_fix, tmp_path
):
    # One `fix --apply` shared with test_fix_file_bytes (its script has CRLF line endings and a
    # latin-1 cookie; an LF script goes through --apply in test_mcp's loop)
    project, original, out = applied_fix.project, applied_fix.original, applied_fix.fix
    assert out.returncode == 0, out.stdout + out.stderr
    patch = RunRecord.load(project / "fix.json").patch
    assert patch.applied and patch.path == str(project / "torchdoctor-fix.diff")
    backup = Path(patch.backup)
    assert backup.parent.name == ".torchdoctor-backup" and backup.is_relative_to(project)
    assert (backup / "train.py").read_bytes() == original
    assert (backup.parent / ".gitignore").read_text() == "*\n"  # out of the user's git status
    assert f"patch applied to your files (the diff is kept at {patch.path})" in out.stdout
    # What --apply wrote is what the diff gives.
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "train.py").write_bytes(original)
    applied = subprocess.run(
        ["patch", "-p1", "-s", "-i", patch.path], cwd=copy, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stderr
    assert (copy / "train.py").read_bytes() == (project / "train.py").read_bytes() != original
    # The applied script, run plainly under `torchdoctor run`, has the settings and the speed.
    run = applied_fix.after
    assert run.returncode == 0, run.stdout + run.stderr
    after = RunRecord.load(project / "after.json")
    assert after.loader.num_workers >= 2 and not after.loader_overrides
    before = RunRecord.load(project / "fix.json")
    assert after.step_ms.mean < before.step_ms.mean / 1.4


@pytest.mark.timing
def test_a_compute_bound_script_gets_no_patch_and_says_why(tmp_path):
    shutil.copy(SCENARIOS / "tiny_mlp.py", tmp_path / "train.py")
    out = torchdoctor(
        "fix", "--steps", "5", "--warmup", "1", "--quiet", "--json", "fix.json", "--",
        "train.py",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (tmp_path / "torchdoctor-fix.diff").exists()
    patch = RunRecord.load(tmp_path / "fix.json").patch
    assert patch.diff == "" and not patch.remedies
    assert "No patch: nothing the patcher writes was found to change." in out.stdout


def test_a_script_the_patcher_cannot_parse_is_refused_before_it_runs(tmp_path):
    (tmp_path / "train.py").write_text("import torch\ndef broken(:\n    pass\n")
    out = torchdoctor("fix", "--", "train.py", cwd=tmp_path)
    assert out.returncode == 2
    assert "train.py: cannot be parsed (line 2: " in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


@pytest.mark.timing
def test_the_seed_004_round_trips_are_rewritten_checked_and_gone_on_a_rerun(tmp_path):
    shutil.copy(SCENARIOS / "sync_loss.py", tmp_path / "train.py")
    rewritten = {"constant-rebuilt", "tensor-assert", "python-index"}
    out = torchdoctor(
        # On the CPU the rewrites neither gain nor lose: the whole patch is kept unless every
        # pair of runs judges it slower. Pairs of the same code came out 0.80x to 1.81x here
        # (the machine, not the code: the rewrites alone time 8% faster in one process), and
        # CI saw "the whole patch measured slower" with 6 steps and 2 rounds, then with 16 and
        # 3. Two of nine pairs seen here were below 0.91x: with five rounds, all of them landing
        # there is a chance of about one in 1800. Beside a busy loop, a slower reading is the
        # load's ("could not tell"): the rewrites are written on their losses all the same (CI
        # once read them slower in all five rounds there, and nothing was written)
        "fix", "--steps", "16", "--warmup", "2", "--rounds", "5", "--quiet", "--json",
        "fix.json", "--", "train.py",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    record = RunRecord.load(tmp_path / "fix.json")
    assert {f.kind for f in record.findings} >= rewritten
    syncs = [r for r in record.patch.remedies if r.numerics]
    assert len(syncs) == 3
    for remedy in syncs:
        # kept on their numerics: the seeded patched run computed the original's losses, and
        # the sync finder watching it no longer found the round-trip
        assert remedy.kept and remedy.judged is None and remedy.checked_losses == 4
        assert remedy.rechecked == "gone", remedy
    # the rewrites alone are said to gain on an accelerator; a timed remedy the diagnosis also
    # found (the threads, on a busy machine) and kept beside them is the patch's measured gain
    timed_kept = [r.key for r in record.patch.remedies if not r.numerics and r.kept]
    said = "gain appears on an accelerator" in " ".join(record.patch.notes)
    assert said == (not timed_kept), (timed_kept, record.patch.notes, record.patch.remedies)
    applied = subprocess.run(
        ["patch", "-p1", "-s", "-i", "torchdoctor-fix.diff"], cwd=tmp_path, capture_output=True
    )
    assert applied.returncode == 0, applied.stderr
    run = torchdoctor(
        "run", "--steps", "4", "--warmup", "1", "--quiet", "--no-counterfactuals",
        "--json", "after.json", "--", "train.py",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    after = RunRecord.load(tmp_path / "after.json")
    assert not {f.kind for f in after.findings} & rewritten, after.findings


@pytest.mark.timing
def test_a_measured_fused_optimizer_trial_is_written_at_the_optimizers_construction(
    tmp_path, cpu_hog
):
    shutil.copy(SCENARIOS / "many_params.py", tmp_path / "train.py")
    out = torchdoctor(
        # three rounds, each of which must show the fused step faster by 10% on its own: beside
        # a hog single runs came out up to 2.1x slower than the others (rounds of 2.61x, 1.28x
        # and 4.34x); judged by how far one side's runs were apart, a 2.04x was refused
        "fix", "--steps", "20", "--warmup", "2", "--rounds", "3", "--try", "foreach", "--quiet",
        "--json", "fix.json", "--", "train.py",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    record = RunRecord.load(tmp_path / "fix.json")
    (trial,) = record.trials
    assert (
        trial.detail["where"] == f"{tmp_path / 'train.py'}:10" and trial.detail["flag"] == "fused"
    )
    (remedy,) = record.patch.remedies
    assert [(c.file, c.line, c.what) for c in remedy.changes] == [
        ("train.py", 10, "fused=True added")
    ]
    # ~1.9x quiet (150 layers' Adam step): kept. Beside the hog, whole runs came out up to 2.1x
    # apart, and in CI the patched runs' forward and backward once ran 31% slower than the
    # original's (the lever makes them a fifth quicker): could not tell is then the answer, and
    # nothing is written; never a firm "no gain" or "slower".
    if cpu_hog is not None and not remedy.kept:
        assert remedy.judged.judgement == "UNCLEAR", remedy
        assert "could not tell" in remedy.reason and record.patch.diff == "", remedy.reason
        return
    assert remedy.key == "optimizer" and remedy.kept, remedy
    assert "+    fused=True,\n" in record.patch.diff
    check = subprocess.run(
        ["git", "apply", "--check", "torchdoctor-fix.diff"], cwd=tmp_path, capture_output=True
    )
    assert check.returncode == 0, check.stderr


def test_a_measured_amp_trial_is_written_around_the_forward_and_loss_with_its_caveat(tmp_path):
    shutil.copy(SCENARIOS / "small_cnn.py", tmp_path / "train.py")
    out = torchdoctor(
        # one round, no counterfactuals: kept or not, both are asserted below (on a CPU with
        # bf16 kernels, AVX-512's, the trial gains and the patch is measured: 75 s with two)
        "fix", "--steps", "12", "--warmup", "2", "--try", "amp", "--rounds", "1",
        "--no-counterfactuals", "--quiet", "--json", "fix.json", "--html", "fix.html", "--",
        "train.py",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    record = RunRecord.load(tmp_path / "fix.json")
    (trial,) = record.trials
    assert trial.detail["model_at"] == f"{tmp_path / 'train.py'}:27", trial.detail
    assert trial.detail["dtype"] == "bfloat16" and trial.detail["device_type"] == "cpu"
    if trial.judged is None or trial.judged.speedup <= 1:
        pytest.skip(f"bf16 autocast measured {trial.judged} on this CPU: nothing to write")
    (remedy,) = record.patch.remedies
    assert remedy.key == "amp" and "changes the numerics" in remedy.caveat
    assert [(c.file, c.line) for c in remedy.changes] == [("train.py", 27)]
    assert remedy.judged is not None and remedy.judged.judgement in JUDGEMENTS
    assert "caveat: changes the numerics" in out.stdout
    assert "caveat: changes the numerics" in (tmp_path / "fix.html").read_text()
    if remedy.kept:
        assert (
            "+        # torchdoctor fix: bf16 autocast changes the numerics: check the loss curve\n"
            '+        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):\n'
            "+            loss = nn.functional.cross_entropy(model(x), y)\n"
        ) in record.patch.diff
        check = subprocess.run(
            ["git", "apply", "--check", "torchdoctor-fix.diff"], cwd=tmp_path, capture_output=True
        )
        assert check.returncode == 0, check.stderr
    else:  # not kept: measured no faster, or the load moved the parts amp leaves alone
        words = ("not faster", "slower", "could not tell")
        assert any(w in remedy.reason for w in words), remedy.reason
