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

    PYTHONPATH=src python benchmarks/load_robustness.py [--loaded 3] [--load-procs 2]
        [--steps 20] [--only TEXT]

A run takes about 10-60 s loaded; the default set, 4 scenarios x 4 runs, about 10 minutes here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "scenarios"

#: name -> (script, its arguments, extra ``run`` flags, the trial judged, if any)
CASES: dict[str, tuple[Path, list[str], list[str], str | None]] = {
    "gan, per-sample numpy (input)": (ROOT / "benchmarks" / "_gan_numpy.py", [], [], None),
    "small CNN (compute)": (SCENARIOS / "small_cnn.py", [], [], None),
    "host work between the calls": (SCENARIOS / "train_loop.py", ["--host-ms", "6"], [], None),
    "small CNN, --try foreach": (SCENARIOS / "small_cnn.py", [], ["--try", "foreach"], "foreach"),
}


def _spells(seed: int, stop: float) -> None:
    """One load process: busy, then idle, each for 0.5-3 s, until ``stop`` (a monotonic time)."""
    rng = random.Random(seed)
    while time.monotonic() < stop:
        end = min(stop, time.monotonic() + rng.uniform(0.5, 3.0))
        while time.monotonic() < end:
            pass
        time.sleep(max(0.0, min(stop - time.monotonic(), rng.uniform(0.5, 3.0))))


class Load:
    """``procs`` processes busy and idle in random spells, for as long as the ``with`` lasts."""

    def __init__(self, procs: int, seed: int) -> None:
        self.procs, self.seed = procs, seed
        self._running: list[multiprocessing.Process] = []

    def __enter__(self) -> Load:
        stop = time.monotonic() + 3600
        for i in range(self.procs):
            p = multiprocessing.Process(target=_spells, args=(self.seed * 100 + i, stop))
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
    """What one run said: the verdict's kind, whether it was firm, the trial's judgement."""

    kind: str
    firm: bool
    trial: str | None = None

    def words(self) -> str:
        text = self.kind + ("" if self.firm else " (not firm)")
        return text + (f", trial {self.trial}" if self.trial else "")


@dataclass
class Tally:
    runs: int = 0
    same: int = 0
    not_firm: int = 0
    firm_wrong: int = 0
    trial_unclear: int = 0
    trial_wrong: int = 0
    lines: list[str] = field(default_factory=list)


def answer(case: str, steps: int) -> Answer:
    script, args, flags, trial = CASES[case]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        subprocess.run(
            [sys.executable, "-m", "torchdoctor", "run", "--steps", str(steps), "--quiet",
             "--json", str(out), *flags, "--", str(script), *args],
            capture_output=True, text=True, timeout=900,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )  # fmt: skip
        if not out.exists():
            return Answer("FAILED", False)
        record = json.loads(out.read_text())
    verdict = record.get("verdict") or {}
    judged = None
    for t in record.get("trials") or []:
        if t.get("name") == trial and t.get("judged"):
            judged = t["judged"]["judgement"]
    return Answer(verdict.get("kind", "?"), verdict.get("firm", True), judged)


def judge(quiet: Answer, loaded: Answer, tally: Tally) -> None:
    tally.runs += 1
    tally.same += loaded.kind == quiet.kind
    tally.not_firm += not loaded.firm
    tally.firm_wrong += loaded.firm and loaded.kind != quiet.kind
    if quiet.trial is not None and loaded.trial is not None:
        tally.trial_unclear += loaded.trial == "UNCLEAR"
        changed = {"IMPROVED", "REGRESSED"}
        tally.trial_wrong += loaded.trial in changed and loaded.trial != quiet.trial


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loaded", type=int, default=3, help="loaded runs per scenario")
    parser.add_argument("--load-procs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--only", default="", help="scenarios whose name holds this text")
    opts = parser.parse_args()
    cases = [c for c in CASES if opts.only in c]
    total = Tally()
    print(f"{opts.loaded} loaded runs per scenario beside {opts.load_procs} bursty processes "
          f"on {os.cpu_count()} cores; --steps {opts.steps}")  # fmt: skip
    for n, case in enumerate(cases):
        quiet = answer(case, opts.steps)
        tally = Tally()
        loaded = []
        with Load(opts.load_procs, seed=n):
            for _ in range(opts.loaded):
                got = answer(case, opts.steps)
                loaded.append(got.words())
                judge(quiet, got, tally)
        print(f"{case:<32} quiet {quiet.words():<28} loaded: {'; '.join(loaded)}")
        for name in ("runs", "same", "not_firm", "firm_wrong", "trial_unclear", "trial_wrong"):
            setattr(total, name, getattr(total, name) + getattr(tally, name))
    print(
        f"loaded runs: {total.runs}; the quiet verdict in {total.same} ({total.same / max(1, total.runs):.0%}); "
        f"not firm {total.not_firm}; FIRM WRONG {total.firm_wrong}; trials could not tell "
        f"{total.trial_unclear}, judged the wrong way {total.trial_wrong}"
    )
    print("goals: no firm wrong answer; the quiet verdict in 2 of 3 loaded runs; no trial "
          "judged outside its bound")  # fmt: skip


if __name__ == "__main__":
    main()
