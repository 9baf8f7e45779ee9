"""Worker sweep vs an exhaustive sweep, measured side by side in one run.

For datasets with a known, injected per-sample cost this prints the wall time of torchdoctor's
sweep (which stops on a plateau), the wall time of measuring every candidate, and
quality = throughput at the sweep's pick / best throughput of the exhaustive sweep (both from
the exhaustive sweep's measurements, so they share conditions).

    python benchmarks/worker_sweep.py            # candidates for this machine's CPUs
    python benchmarks/worker_sweep.py --cpus 8   # the candidate list of an 8-CPU machine
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from torch.utils.data import DataLoader

from torchdoctor.loader import (
    SweepPolicy,
    available_cpus,
    measure_loader,
    sweep_candidates,
    sweep_loader,
)

# The datasets with injected costs are the ones the tests use.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from loader_datasets import Busy, Disk  # noqa: E402

SCENARIOS = {
    "disk (10 ms serial + 15 ms parallel sleep per sample)": lambda: Disk(100_000, 0.010, 0.015),
    "io (20 ms sleep per sample)": lambda: Disk(100_000, 0.0, 0.020),
    "cpu (4 ms busy loop per sample)": lambda: Busy(100_000, 0.004),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=available_cpus())
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=15, help="counted batches per setting")
    args = parser.parse_args()
    candidates = sweep_candidates(args.cpus, 0)
    print(f"machine: {available_cpus()} CPUs; candidates for {args.cpus} CPUs: {candidates}")
    print(f"batch size {args.batch_size}, {args.batches} counted batches per setting\n")
    for name, make in SCENARIOS.items():
        loader = DataLoader(make(), batch_size=args.batch_size)
        start = time.perf_counter()
        sweep = sweep_loader(loader, SweepPolicy(candidates), args.batches)
        sweep_s = time.perf_counter() - start
        start = time.perf_counter()
        exhaustive = {n: measure_loader(loader, n, args.batches) for n in candidates}
        exhaustive_s = time.perf_counter() - start
        best_n = max(exhaustive, key=exhaustive.__getitem__)
        quality = exhaustive[sweep.best_workers] / exhaustive[best_n]
        print(name)
        print(
            "  sweep:      "
            + "  ".join(f"{p.num_workers}:{p.batches_per_s:.1f}" for p in sweep.points)
        )
        print("  exhaustive: " + "  ".join(f"{n}:{r:.1f}" for n, r in exhaustive.items()))
        print(
            f"  sweep picked num_workers={sweep.best_workers} (stopped: {sweep.stopped}) "
            f"in {sweep_s:.1f} s; exhaustive best num_workers={best_n} in {exhaustive_s:.1f} s"
        )
        print(
            f"  quality = {exhaustive[sweep.best_workers]:.1f} / {exhaustive[best_n]:.1f} "
            f"batches/s = {quality:.2f}; sweep time / exhaustive time = "
            f"{sweep_s / exhaustive_s:.2f}\n"
        )


if __name__ == "__main__":
    main()
