"""Worker sweeps vs exhaustive sweeps, measured side by side in one run.

Loader alone (``--only loader``): for datasets with a known, injected per-sample cost this prints
the wall time of torchdoctor's sweep (which stops on a plateau), the wall time of measuring
every candidate, and quality = throughput at the sweep's pick / best throughput of the
exhaustive sweep (both from the exhaustive sweep's measurements, so they share conditions).

Whole steps with threads (``--only threads``): a CPU training loop with one costly transform and
a tiny model (tests/scenarios/cpu_transform.py) is driven through the capture's in-loop sweep,
once with torchdoctor's search of ``(num_workers, threads)`` and once over every pair of the
grid (worker candidates x threads 1..torch.get_num_threads()), in ABBA order, ``--rounds``
times, both after the script's own setting was measured (a torchdoctor run measures it before
its sweep); it prints both grids, quality = steps/s at the search's pick / the best steps/s, both
from the round's two exhaustive runs (each pair's mean; the script's own setting: its measurement
before them and one after), and search time / exhaustive time.

    python benchmarks/worker_sweep.py            # candidates for this machine's CPUs
    python benchmarks/worker_sweep.py --cpus 8   # the candidate list of an 8-CPU machine
    python benchmarks/worker_sweep.py --only threads --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.utils.data.dataloader as dataloader_module
from torch.utils.data import DataLoader

from torchdoctor.capture import InLoopSweep, Patcher
from torchdoctor.loader import (
    SweepPolicy,
    WorkerThreadPolicy,
    available_cpus,
    measure_loader,
    sweep_candidates,
    sweep_loader,
)
from torchdoctor.record import SweepPoint

# The datasets with injected costs and the CPU script are the ones the tests use.
TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "scenarios")]
from cpu_transform import build_loader, build_model, step  # noqa: E402

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
    parser.add_argument("--only", choices=["loader", "threads"], help="run one part only")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds of the threads part")
    parser.add_argument("--steps", type=int, default=8, help="counted steps per setting")
    parser.add_argument("--transform-ms", type=float, default=2.0, help="CPU ms per sample")
    args = parser.parse_args()
    if args.only != "threads":
        loader_alone(args)
    if args.only != "loader":
        with_threads(args)


def loader_alone(args: argparse.Namespace) -> None:
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


class EveryPair:
    """The exhaustive search: every ``(num_workers, threads)`` pair, in grid order."""

    def __init__(self, settings: list[tuple[int, int]]) -> None:
        self.todo = list(settings)
        self.points: list[SweepPoint] = []

    def next(self) -> tuple[int, int] | None:
        return self.todo.pop(0) if self.todo else None

    def add(self, num_workers: int, threads: int, rate: float, **measured) -> None:
        self.points.append(SweepPoint(num_workers, rate, threads=threads, **measured))


def drive(policy, loader: DataLoader, model, optimizer, steps: int) -> float:
    """Train on the in-loop sweep's batches until ``policy`` is done; its wall time in s."""
    original_next = dataloader_module._BaseDataLoaderIter.__next__
    sweep = InLoopSweep(loader, policy, steps_per_setting=steps, patcher=Patcher())
    start = time.perf_counter()
    try:
        sweep.start()
        while True:
            t0 = time.perf_counter_ns()
            step(model, optimizer, sweep.next_batch(original_next))
            if sweep.on_step_end((time.perf_counter_ns() - t0) / 1e6, 1):
                break
    finally:
        sweep.close()
    return time.perf_counter() - start


def with_threads(args: argparse.Namespace) -> None:
    default_threads = torch.get_num_threads()
    workers = sweep_candidates(args.cpus, 0)
    baseline_setting = (0, default_threads)
    grid = [(w, t) for w in workers for t in range(default_threads, 0, -1)]
    print(
        f"\nwhole steps, CPU model: {args.transform_ms} ms of CPU per sample, batch 16, tiny MLP; "
        f"{available_cpus()} CPUs, torch threads {default_threads}; grid {len(grid)} pairs "
        f"(workers {workers} x threads 1..{default_threads}); {args.steps} counted steps each.\n"
        f"Both start from the script's own setting {baseline_setting} measured before them (as "
        "a torchdoctor run has it before its sweep): the exhaustive search measures the other "
        f"{len(grid) - 1} pairs."
    )
    loader = build_loader(args.transform_ms)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):  # first steps pay one-time costs
        step(model, optimizer, next(iter(loader)))
    qualities, time_ratios = [], []
    for r in range(args.rounds):
        measured = EveryPair([baseline_setting])
        drive(measured, loader, model, optimizer, args.steps)
        baseline = measured.points[0].batches_per_s
        runs = []
        for kind in ("search", "exhaustive", "exhaustive", "search"):  # ABBA
            if kind == "search":
                policy = WorkerThreadPolicy(
                    workers,
                    cpu_count=args.cpus,
                    default_threads=default_threads,
                    current_workers=0,
                    baseline_batches_per_s=baseline,
                )
            else:
                policy = EveryPair([s for s in grid if s != baseline_setting])
            seconds = drive(policy, loader, model, optimizer, args.steps)
            runs.append((policy, seconds))
        print(f"round {r + 1}: the script as it is {baseline:.1f} steps/s")
        # The reference: each pair's mean over the round's two exhaustive runs (one noisy
        # measurement per pair would make its best a lucky draw, and every pick look worse);
        # the script's own setting, measured before them, once more after them (untimed).
        again = EveryPair([baseline_setting])
        drive(again, loader, model, optimizer, args.steps)
        rates = {baseline_setting: statistics.mean([baseline, again.points[0].batches_per_s])}
        for pair in (s for s in grid if s != baseline_setting):
            rates[pair] = statistics.mean(
                p.batches_per_s
                for policy, _ in (runs[1], runs[2])
                for p in policy.points
                if (p.num_workers, p.threads) == pair
            )
        best = max(rates, key=rates.__getitem__)
        for (search, search_s), (_, exhaustive_s) in ((runs[0], runs[1]), (runs[3], runs[2])):
            pick = search.best()
            quality = rates[pick] / rates[best]
            ratio = search_s / exhaustive_s
            qualities.append(quality)
            time_ratios.append(ratio)
            probe = "  ".join(f"{p.threads}:{p.batches_per_s:.0f}" for p in search.probe)
            tried = "  ".join(
                f"{p.num_workers}/{p.threads}:{p.batches_per_s:.1f}" for p in search.points[1:]
            )
            print(f"  search: model alone by threads {probe};  {tried}")
            print(
                "  exhaustive, mean of the round's two: "
                + "  ".join(f"{w}/{t}:{v:.1f}" for (w, t), v in rates.items())
            )
            print(
                f"  pick workers/threads {pick[0]}/{pick[1]} in {search_s:.1f} s; best "
                f"{best[0]}/{best[1]}; quality {quality:.2f}; the exhaustive run beside it took "
                f"{exhaustive_s:.1f} s: search time / exhaustive time {ratio:.2f}"
            )
    print(
        f"median over {len(qualities)} pairs: quality {statistics.median(qualities):.2f} "
        f"(min {min(qualities):.2f}; goal >= 0.90), search time / exhaustive time "
        f"{statistics.median(time_ratios):.2f} (max {max(time_ratios):.2f}; goal <= 0.50)"
    )


if __name__ == "__main__":
    main()
