"""What diagnosing a DDP job costs each rank, and what communication made free shows.

The job is ``tests/scenarios/ddp_train.py`` (2 ranks, gloo on CPU, one thread each), launched
plain by ``torch.distributed.run`` and by ``torchdoctor run --nproc-per-node 2``, alternately
(ABBA). In both, the script times its own steps (``--timing-file``), so the same clock judges
both: the ratio is each rank's median step during torchdoctor's measured steps over its median
over the same step numbers of the plain run. Then the torchdoctor runs' records give the step
with communication made free (the no-sync phase) and the ceiling from hiding communication.

    PYTHONPATH=src python benchmarks/distributed_overhead.py [--rounds 2] [--hidden 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "scenarios" / "ddp_train.py"
WARMUP, SYNC_STEPS, STEPS = 2, 2, 20
#: Step numbers torchdoctor measures: after its warmup and the sync finder's steps.
WINDOW = slice(WARMUP + SYNC_STEPS, WARMUP + SYNC_STEPS + STEPS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=1024)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    ratios: dict[int, list[float]] = {0: [], 1: []}
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = ("plain", "torchdoctor") if i % 2 == 0 else ("torchdoctor", "plain")
            medians = {}
            for kind in order:
                timing = Path(tmp) / f"{kind}{i}"
                job = [str(JOB), "--hidden", str(args.hidden), "--epochs", "3",
                       "--timing-file", str(timing)]  # fmt: skip
                if kind == "plain":
                    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", *job]  # fmt: skip
                else:
                    out = Path(tmp) / f"r{i}.json"
                    cmd = [sys.executable, "-m", "torchdoctor", "run", "--nproc-per-node", "2",
                           "--steps", str(STEPS), "--warmup", str(WARMUP), "--quiet",
                           "--json", str(out), "--", *job]  # fmt: skip
                subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=tmp)
                if kind == "torchdoctor":
                    records.append(json.loads(out.read_text()))
                medians[kind] = {r: _window_median(Path(f"{timing}.{r}")) for r in (0, 1)}
            for r in (0, 1):
                ratios[r].append(medians["torchdoctor"][r] / medians["plain"][r])
                print(
                    f"round {i + 1} rank {r}: plain {medians['plain'][r]:.2f} ms, under "
                    f"torchdoctor {medians['torchdoctor'][r]:.2f} ms, ratio {ratios[r][-1]:.3f}"
                )
    for r in (0, 1):
        print(f"rank {r}: captured / plain step, median of {args.rounds} rounds: "
              f"{statistics.median(ratios[r]):.3f}")  # fmt: skip
    for rec in records:
        job = rec["distributed"]
        print(
            f"record: verdict {rec['verdict']['kind']}, job step "
            f"{max(r['step_ms']['mean'] for r in job['ranks']):.2f} ms, no-sync step "
            f"{job['no_sync_step_ms']:.2f} ms, communication-free ceiling "
            f"{job['comm_ceiling']:.2f}x, scaling efficiency {job['scaling_efficiency']:.2f}, "
            f"stragglers {[(s['rank'], s['part']) for s in job['stragglers']]}"
        )


def _window_median(path: Path) -> float:
    steps = [float(x) for x in path.read_text().split()]
    return statistics.median(steps[WINDOW])


if __name__ == "__main__":
    main()
