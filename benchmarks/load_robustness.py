"""Does load change our answer? Each scenario quiet, then beside a bursty load, verdicts compared.

Each scenario runs under ``torchdoctor run --json`` once on a quiet machine, then ``--loaded``
times beside a load generator: ``--load-procs`` processes, each busy and idle in turns of random
0.5-3 s spells (seeded), so load comes and goes during the runs as other jobs' does. Per
scenario it prints the quiet answer and each loaded one, and at the end how often a loaded run
gave the quiet answer, how often it said it was not firm (or "could not tell" for a trial), and
how often it gave a **firm wrong answer**: a firm verdict of another kind, or a trial judged
worth it or slower against a quiet judgement of the other way or of no clear gain. The goals
(issue 39): no firm wrong answer; the quiet verdict in at least 2 of 3 loaded runs; no trial
judged outside its bound.

The ``fix`` cases run ``torchdoctor fix``: ``--try foreach`` (three alternated rounds) on a
script with many parameters, and the demo's slow pipeline on the demo's JPEG images (made once per
run), whose remedies are the DataLoader's settings and the loss's rewrites. The answer is the
first remedy's judgement, with its figure (and the figure as timed, where its rounds were corrected
for the load each run saw). ``--versus SRC`` runs every answer a second time from another
checkout's ``src`` (an older commit's ``git worktree``), right after this one's and under the
same load, and tallies both: the two codes side by side. ``--steady`` makes the load processes
busy without a pause (a hog per process) instead of in spells.

    PYTHONPATH=src python benchmarks/load_robustness.py [--loaded 3] [--load-procs 2]
        [--steps 20] [--only TEXT] [--versus SRC] [--steady]

A run takes about 10-60 s loaded; the default set, 5 scenarios x 4 runs, about 12 minutes here.
"""

from __future__ import annotations

import argparse
import atexit
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "scenarios"

#: The trial name of a case that runs ``torchdoctor fix``: its remedy is judged.
FIX = "fix"
#: Stands in a case's arguments for the folder of the demo's JPEG images (made once per run).
IMAGES = "{images}"
#: name -> (script, its arguments, extra ``run`` flags, the trial judged, if any)
CASES: dict[str, tuple[Path, list[str], list[str], str | None]] = {
    "gan, per-sample numpy (input)": (ROOT / "benchmarks" / "_gan_numpy.py", [], [], None),
    "small CNN (compute)": (SCENARIOS / "small_cnn.py", [], [], None),
    "host work between the calls": (SCENARIOS / "train_loop.py", ["--host-ms", "6"], [], None),
    "small CNN, --try foreach": (SCENARIOS / "small_cnn.py", [], ["--try", "foreach"], "foreach"),
    "many params, fix --try foreach": (
        SCENARIOS / "many_params.py",
        [],
        ["--try", "foreach", "--rounds", "3", "--warmup", "2"],
        FIX,
    ),
    "the demo's images, fix (loader)": (
        ROOT / "src" / "torchdoctor" / "cli" / "demo" / "scenarios" / "demo_train.py",
        ["--data", IMAGES, "--variant", "slow"],
        ["--warmup", "3"],
        FIX,
    ),
}


def _spells(seed: int, stop: float, steady: bool = False) -> None:
    """One load process: busy, then idle, each for 0.5-3 s, until ``stop`` (a monotonic time);
    ``steady``: busy throughout."""
    rng = random.Random(seed)
    while time.monotonic() < stop:
        end = min(stop, time.monotonic() + rng.uniform(0.5, 3.0))
        while time.monotonic() < end:
            pass
        if not steady:
            time.sleep(max(0.0, min(stop - time.monotonic(), rng.uniform(0.5, 3.0))))


class Load:
    """``procs`` processes busy and idle in random spells, for as long as the ``with`` lasts."""

    def __init__(self, procs: int, seed: int, steady: bool = False) -> None:
        self.procs, self.seed, self.steady = procs, seed, steady
        self._running: list[multiprocessing.Process] = []

    def __enter__(self) -> Load:
        stop = time.monotonic() + 3600
        for i in range(self.procs):
            args = (self.seed * 100 + i, stop, self.steady)
            p = multiprocessing.Process(target=_spells, args=args)
            p.daemon = True
            p.start()
            self._running.append(p)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self._running:
            p.terminate()
            p.join(5)


@dataclass
class Answer:
    """What one run said: the verdict's kind, whether it was firm, the trial's judgement (and for
    ``fix``'s remedy its figure)."""

    kind: str
    firm: bool
    trial: str | None = None
    figure: str = ""

    def words(self) -> str:
        text = self.kind + ("" if self.firm else " (not firm)")
        return text + (f", trial {self.trial}" if self.trial else "") + self.figure


@dataclass
class Tally:
    runs: int = 0
    same: int = 0
    not_firm: int = 0
    firm_wrong: int = 0
    trial_same: int = 0
    trial_unclear: int = 0
    trial_wrong: int = 0
    lines: list[str] = field(default_factory=list)


def answer(case: str, steps: int, src: Path, images: Path) -> Answer:
    script, args, flags, trial = CASES[case]
    args = [str(images) if a == IMAGES else a for a in args]
    command = "fix" if trial == FIX else "run"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        shutil.copy(script, Path(tmp) / script.name)  # fix writes its diff beside the script
        subprocess.run(
            [sys.executable, "-m", "torchdoctor", command, "--steps", str(steps), "--quiet",
             "--json", str(out), *flags, "--", script.name, *args],
            capture_output=True, text=True, timeout=900, cwd=tmp,
            env={**os.environ, "PYTHONPATH": str(src)},
        )  # fmt: skip
        if not out.exists():
            return Answer("FAILED", False)
        record = json.loads(out.read_text())
    verdict = record.get("verdict") or {}
    judged, figure = None, ""
    for t in record.get("trials") or []:
        if t.get("name") == trial and t.get("judged"):
            judged = t["judged"]["judgement"]
    remedies = (record.get("patch") or {}).get("remedies") or []
    if trial == FIX and remedies and remedies[0].get("judged"):
        j = remedies[0]["judged"]
        judged = j["judgement"]
        figure = f" {j['speedup']:.2f}x ({j['low']:.2f}-{j['high']:.2f})"
        if j.get("as_timed"):
            figure += " as timed " + "/".join(f"{x:.2f}" for x in j["as_timed"])
    return Answer(verdict.get("kind", "?"), verdict.get("firm", True), judged, figure)


def judge(quiet: Answer, loaded: Answer, tally: Tally) -> None:
    tally.runs += 1
    tally.same += loaded.kind == quiet.kind
    tally.not_firm += not loaded.firm
    tally.firm_wrong += loaded.firm and loaded.kind != quiet.kind
    if quiet.trial is not None and loaded.trial is not None:
        tally.trial_same += loaded.trial == quiet.trial
        tally.trial_unclear += loaded.trial == "UNCLEAR"
        changed = {"IMPROVED", "REGRESSED"}
        tally.trial_wrong += loaded.trial in changed and loaded.trial != quiet.trial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loaded", type=int, default=3, help="loaded runs per scenario")
    parser.add_argument("--load-procs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--only", default="", help="scenarios whose name holds this text")
    parser.add_argument("--versus", type=Path, help="another checkout's src, run alternately")
    parser.add_argument("--steady", action="store_true", help="load busy throughout")
    opts = parser.parse_args()
    cases = [c for c in CASES if opts.only in c]
    images = Path(tempfile.gettempdir())  # stands for nothing unless a case asks for it
    if any(IMAGES in CASES[c][1] for c in cases):
        sys.path.insert(0, str(ROOT / "src"))
        from torchdoctor.cli.demo.runner import generate_images

        images = generate_images(Path(tempfile.mkdtemp(prefix="torchdoctor-images-")))
        atexit.register(shutil.rmtree, images, True)
    trees = {"this": ROOT / "src"}
    if opts.versus is not None:
        trees["versus"] = opts.versus.resolve()
    totals = {name: Tally() for name in trees}
    load = "steady" if opts.steady else "bursty"
    print(f"{opts.loaded} loaded runs per scenario beside {opts.load_procs} {load} processes "
          f"on {os.cpu_count()} cores; --steps {opts.steps}")  # fmt: skip
    for n, case in enumerate(cases):
        quiet = {name: answer(case, opts.steps, src, images) for name, src in trees.items()}
        tallies = {name: Tally() for name in trees}
        loaded: dict[str, list[str]] = {name: [] for name in trees}
        with Load(opts.load_procs, seed=n, steady=opts.steady):
            for i in range(opts.loaded):
                names = list(trees) if i % 2 == 0 else list(reversed(trees))
                for name in names:
                    got = answer(case, opts.steps, trees[name], images)
                    loaded[name].append(got.words())
                    judge(quiet[name], got, tallies[name])
        for name in trees:
            label = f"[{name}] " if len(trees) > 1 else ""
            print(f"{label}{case:<32} quiet {quiet[name].words():<28} "
                  f"loaded: {'; '.join(loaded[name])}")  # fmt: skip
            total, tally = totals[name], tallies[name]
            for field_ in (
                "runs",
                "same",
                "not_firm",
                "firm_wrong",
                "trial_same",
                "trial_unclear",
                "trial_wrong",
            ):
                setattr(total, field_, getattr(total, field_) + getattr(tally, field_))
    for name, total in totals.items():
        label = f"[{name}] " if len(trees) > 1 else ""
        print(
            f"{label}loaded runs: {total.runs}; the quiet verdict in {total.same} "
            f"({total.same / max(1, total.runs):.0%}); not firm {total.not_firm}; FIRM WRONG "
            f"{total.firm_wrong}; trials as judged quiet {total.trial_same}, could not tell "
            f"{total.trial_unclear}, judged the wrong "
            f"way {total.trial_wrong}"
        )
    print("goals: no firm wrong answer; the quiet verdict in 2 of 3 loaded runs; no trial "
          "judged outside its bound")  # fmt: skip


if __name__ == "__main__":
    main()
