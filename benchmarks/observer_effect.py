"""What torchdoctor adds to each step, on the script's own clock.

The job (``benchmarks/_timed_job.py``) times each of its whole steps with ``perf_counter``. It
runs plain and under ``torchdoctor run``, alternately (ABBA), as one process and as a 2-rank DDP
job (gloo) launched by torchrun, and as one process under ``run --whole`` (every step watched to
the script's end); with one torch thread per process and with torch's default. For each round
the extra time per step is the median step over the steps torchdoctor measures minus the median
over the same step numbers of the plain run (``whole``: every step after the first
``WHOLE_SKIP``, and the whole loop's time too); the figure printed is the median over the rounds,
per rank, beside the plain step, with a distribution-free interval of that median and its
coverage, and with ``--goal-us`` whether the goal is met (shown met only when the whole interval
is under it: its top is what the rounds cannot rule out). Beside it, the same
difference in the training thread's CPU time per step: what torchdoctor's work on that thread
costs, without the waits for a peer rank that the wall clock also counts (a rank slowed by our
work makes the other wait in its all-reduce).

    PYTHONPATH=src python benchmarks/observer_effect.py [--rounds 3] [--jobs one,ddp,whole]
        [--threads 1,default] [--hidden 256] [--window 40] [--device cpu] [--src DIR]
        [--goal-us 100]

``--device cuda`` trains the job on a GPU (one process and ``whole`` only: the DDP job is gloo
on the CPU); ``--src`` measures the torchdoctor package found in another checkout's ``src`` (a version before
a change), with this checkout's job and benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The torchdoctor measured: this checkout's, or another's (``--src``).
SRC = ROOT / "src"
JOB = Path(__file__).resolve().parent / "_timed_job.py"
WARMUP, SYNC_STEPS, STEPS = 5, 2, 40
#: Step numbers torchdoctor measures: after its warmup and the sync finder's steps.
WINDOW = slice(WARMUP + SYNC_STEPS, WARMUP + SYNC_STEPS + STEPS)
#: ``run --whole`` watches every step; the first ones (startup, the measured window's hooks
#: changing) are left out of the per-step figure.
WHOLE_SKIP = 30
#: Steps of the job (``--steps``).
JOB_STEPS = 400
#: Where the job trains (``--device``).
DEVICE = "cpu"
#: The most extra time per step, in us, a goal allows (``--goal-us``); none by default.
GOAL_US: float | None = None


def run_once(tmp: Path, name: str, job: str, threads: str, hidden: int, captured: bool):
    """Run the job once; returns ({rank: median window step ms}, record or None)."""
    timing = tmp / name
    script = [str(JOB), "--timing-file", str(timing), "--hidden", str(hidden),
              "--steps", str(JOB_STEPS),
              "--threads", "0" if threads == "default" else threads,
              "--device", DEVICE]  # fmt: skip
    ranks = 2 if job == "ddp" else 1
    record = tmp / f"{name}.json"
    if captured and job == "whole":
        cmd = [sys.executable, "-m", "torchdoctor", "run", "--whole", "--quiet",
               "--json", str(record), "--", *script]  # fmt: skip
    elif captured:
        cmd = [sys.executable, "-m", "torchdoctor", "run", "--steps", str(STEPS),
               "--warmup", str(WARMUP), "--sync-steps", str(SYNC_STEPS), "--quiet",
               "--json", str(record)]  # fmt: skip
        if job == "ddp":
            cmd += ["--nproc-per-node", "2"]
        cmd += ["--", *script]
    elif job == "ddp":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", *script]  # fmt: skip
    else:
        cmd = [sys.executable, *script]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp)
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd[:6])} ... ended with status {done.returncode}:\n{done.stderr[-2000:]}"
        )
    window = slice(WHOLE_SKIP, None) if job == "whole" else WINDOW
    steps = {r: _steps(Path(f"{timing}.{r}")) for r in range(ranks)}
    medians = {r: statistics.median(wall[window]) for r, (wall, _) in steps.items()}
    cpu = {r: statistics.median(thread[window]) for r, (_, thread) in steps.items()}
    if job == "whole":  # and the loop's whole time, as the last "rank"
        medians[-1] = sum(steps[0][0][WHOLE_SKIP:])
    return medians, cpu, (json.loads(record.read_text()) if captured else None)


def _steps(path: Path) -> tuple[list[float], list[float]]:
    """A timing file's steps: their wall times and their training thread's CPU times (ms)."""
    rows = [line.split() for line in path.read_text().splitlines() if line]
    return [float(row[0]) for row in rows], [float(row[1]) for row in rows]


def measure(job: str, threads: str, rounds: int, hidden: int) -> None:
    extra: dict[int, list[float]] = {}
    extra_cpu: dict[int, list[float]] = {}
    plain: dict[int, list[float]] = {}
    recorded = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            medians, cpu = {}, {}
            for captured in order:
                name = f"{'td' if captured else 'plain'}{i}"
                medians[captured], cpu[captured], rec = run_once(
                    Path(tmp), name, job, threads, hidden, captured
                )
                if rec is not None:
                    recorded.append(rec)
            for r, step in medians[False].items():
                plain.setdefault(r, []).append(step)
                extra.setdefault(r, []).append((medians[True][r] - step) * 1000)
            for r, step in cpu[False].items():
                extra_cpu.setdefault(r, []).append((cpu[True][r] - step) * 1000)
    names = {"one": "one process", "ddp": "2-rank DDP", "whole": "run --whole"}
    label = f"{names[job]}, torch threads {threads}" + ("" if DEVICE == "cpu" else f", {DEVICE}")
    if -1 in extra:  # run --whole: the loop's time after the first steps, plain and watched
        loop = [e / 1000 / p for e, p in zip(extra.pop(-1), plain.pop(-1))]
        print(f"{label}: the loop's time (steps {WHOLE_SKIP}+) grew by "
              f"{statistics.median(loop):+.2%} (rounds: {', '.join(f'{x:+.2%}' for x in loop)})")  # fmt: skip
    for r in sorted(extra):
        rounds_us = ", ".join(f"{e:+.0f}" for e in extra[r])
        lo, hi, covers = median_interval(extra[r])
        print(f"{label}, rank {r}: plain step {statistics.median(plain[r]):.3f} ms, "
              f"extra per step {statistics.median(extra[r]):+.0f} us "
              f"({statistics.median(extra[r]) / 10 / statistics.median(plain[r]):+.1f}% of it; "
              f"median of {rounds} rounds: {rounds_us}; {covers:.0%} interval of the median "
              f"{lo:+.0f} to {hi:+.0f} us); the training thread's CPU "
              f"{statistics.median(extra_cpu[r]):+.0f} us per step "
              f"({', '.join(f'{e:+.0f}' for e in extra_cpu[r])})"
              f"{goal_words(hi, GOAL_US)}")  # fmt: skip
    overheads = [rec.get("overhead_ms") for rec in recorded]
    print(f"{label}: record overhead_ms {overheads}")
    for rec in recorded:
        job_rec = rec.get("distributed")
        if job_rec:
            print(f"{label}: record verdict {rec['verdict']['kind']}, no-sync step "
                  f"{job_rec['no_sync_step_ms']:.2f} ms, communication-free ceiling "
                  f"{job_rec['comm_ceiling']:.2f}x")  # fmt: skip


def goal_words(top_us: float, goal_us: float | None) -> str:
    """Whether the extra time per step meets the goal: only when the interval's top is under it
    (a median under the goal with an interval reaching past it is not shown met)."""
    if goal_us is None:
        return ""
    if top_us < goal_us:
        return f"; goal under {goal_us:.0f} us: met"
    return f"; goal under {goal_us:.0f} us: not shown met (the interval reaches {top_us:+.0f} us)"


def median_interval(values: list[float], want: float = 0.9) -> tuple[float, float, float]:
    """A distribution-free interval of the median of the rounds' figures, and its coverage: the
    narrowest pair of order statistics that holds the true median with probability ``want``
    (with few rounds none does: the whole range, with what it covers, 75% for 3 rounds).
    Separate runs of one script on a shared machine differ by more than the cost measured here,
    so a goal is shown met only where the whole interval is under it."""
    ordered, n = sorted(values), len(values)

    def coverage(j: int) -> float:  # of [ordered[j], ordered[n - 1 - j]]
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(j + 1)) / 2**n

    j = 0
    while j + 1 < n - 1 - (j + 1) and coverage(j + 1) >= want:
        j += 1
    return ordered[j], ordered[n - 1 - j], coverage(j)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--jobs", default="one,ddp,whole", help="one (one process), ddp (2 ranks), whole"
    )
    parser.add_argument("--threads", default="1,default", help="torch threads per process")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--steps", type=int, default=400, help="steps of the job")
    parser.add_argument(
        "--window", type=int, default=40,
        help="steps torchdoctor measures (`run --steps`): more steps, steadier medians; the "
        "job's --steps must leave room for the phases after them",
    )  # fmt: skip
    parser.add_argument("--device", default="cpu", help="where the job trains (cpu, cuda)")
    parser.add_argument("--src", type=Path, help="measure the torchdoctor package in DIR")
    parser.add_argument(
        "--goal-us", type=float,
        help="say whether the extra time per step is under this many us (met only when the "
        "whole interval of the median is)",
    )  # fmt: skip
    args = parser.parse_args()
    global SRC, JOB_STEPS, DEVICE, STEPS, WINDOW, GOAL_US
    SRC = args.src.resolve() if args.src else SRC
    STEPS = args.window
    WINDOW = slice(WARMUP + SYNC_STEPS, WARMUP + SYNC_STEPS + STEPS)
    JOB_STEPS, DEVICE, GOAL_US = args.steps, args.device, args.goal_us
    if DEVICE != "cpu" and "ddp" in args.jobs.split(","):
        parser.error("--device: the 2-rank job runs on the CPU (gloo); use --jobs one,whole")
    for threads in args.threads.split(","):
        for job in args.jobs.split(","):
            measure(job, threads, args.rounds, args.hidden)


if __name__ == "__main__":
    main()
