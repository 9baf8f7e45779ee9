"""Is the applied patch as fast as ``torchdoctor fix`` says?

For each scenario, ``torchdoctor fix --apply`` runs on a copy of it (the diagnosis, the patch,
each remedy measured against the original); then the original (from the backup ``--apply``
keeps) and the applied files run plainly under ``torchdoctor run`` (steps only, nothing
injected, the same warmup and steps as fix's own runs), alternately (ABBA), and the speedup of the applied script is printed beside the
interval ``fix`` reported for its patch. That interval is a bootstrap of the steps (it knows the
noise within runs); two runs of one script also differ as a whole, which ``fix``'s judgement
allows for (its allowance): both are printed. One line per scenario:

    scenario  fix: speedup (interval, allowance)  applied: speedup over N rounds  inside?

    PYTHONPATH=src python benchmarks/fix_patch.py [--rounds 4] [--steps 8] [--only TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "scenarios"
#: Warmup steps of every run, fix's and the applied script's alike (the same window measured).
WARMUP = 2
#: name -> (files to copy, the script, its arguments, extra fix flags)
CASES = {
    "loader in a module (fix_project)": (["fix_project/train.py", "fix_project/data.py"],
                                         "train.py", [], []),
    "costly transform (train_loop)": (["train_loop.py"], "train_loop.py",
                                      ["--transform-ms", "12", "--dataset-len", "96"], []),
    "fused Adam (many_params)": (["many_params.py"], "many_params.py", [], ["--try", "foreach"]),
    "bf16 autocast (small_cnn)": (["small_cnn.py"], "small_cnn.py", [], ["--try", "amp"]),
    "channels_last (small_cnn)": (["small_cnn.py"], "small_cnn.py", [],
                                  ["--try", "channels-last"]),
}  # fmt: skip


def torchdoctor(folder: Path, *args: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "torchdoctor", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    if out.returncode != 0:
        raise SystemExit(f"torchdoctor {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")


def mean_step(folder: Path, script: str, args: list[str], steps: int, name: str) -> float:
    torchdoctor(
        folder, "run", "--steps", str(steps), "--warmup", str(WARMUP), "--quiet",
        "--no-counterfactuals",
        "--sync-steps", "0", "--json", name, "--", script, *args,
    )  # fmt: skip
    return statistics.fmean(json.loads((folder / name).read_text())["steps"]["step_ms"])


def case(name: str, files: list[str], script: str, args: list[str], flags: list[str],
         rounds: int, steps: int) -> str:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="fix-bench-") as tmp:
        applied = Path(tmp) / "applied"
        applied.mkdir()
        for f in files:
            shutil.copy(SCENARIOS / f, applied / Path(f).name)
        torchdoctor(
            applied, "fix", "--steps", str(steps), "--warmup", str(WARMUP), "--quiet", "--apply",
            "--json", "fix.json", *flags, "--", script, *args,
        )  # fmt: skip
        patch = json.loads((applied / "fix.json").read_text())["patch"]
        if not patch["applied"]:
            return f"{name:36s} fix kept nothing ({'; '.join(patch['notes']) or 'see its report'})"
        original = Path(tmp) / "original"
        shutil.copytree(applied, original, ignore=shutil.ignore_patterns(".torchdoctor-backup"))
        for path in Path(patch["backup"]).rglob("*.py"):
            shutil.copy(path, original / path.relative_to(patch["backup"]))
        before, after = [], []
        for r in range(rounds):  # ABBA
            order = [(original, before), (applied, after)]
            for folder, out in order if r % 2 == 0 else order[::-1]:
                out.append(mean_step(folder, script, args, steps, f"r{r}.json"))
        ratio = statistics.fmean(before) / statistics.fmean(after)
        judged = patch["judged"]
        lo, hi, allowance = judged["low"], judged["high"], judged["allowance"]
        inside = "yes" if lo <= ratio <= hi else "no"
        near = "yes" if lo / (1 + allowance) <= ratio <= hi * (1 + allowance) else "no"
        return (
            f"{name:36s} fix: {judged['speedup']:.2f}x ({lo:.2f}–{hi:.2f}, allowance "
            f"{allowance:.0%})   applied: {ratio:.2f}x over {rounds} rounds "
            f"({statistics.fmean(before):.1f} → {statistics.fmean(after):.1f} ms)   in the "
            f"interval: {inside}; within its allowance: {near}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--only", help="the cases whose name contains this text")
    args = parser.parse_args()
    for name, (files, script, script_args, flags) in CASES.items():
        if args.only and args.only not in name:
            continue
        print(case(name, files, script, script_args, flags, args.rounds, args.steps), flush=True)


if __name__ == "__main__":
    main()
