"""What capture adds to each step, in instructions the training thread executes (valgrind).

On a shared machine, separate runs of one script differ by more than our cost per step (the
observer-effect benchmark's rounds spread over hundreds of microseconds), and timings inside one
process move with the machine. Instructions do not: this runs the observer-effect job's loop
(``benchmarks/_timed_job.py``'s MLP, one torch thread) under callgrind, plain and with the capture
installed in the process (its hooks, and a step log written each step as a supervised run's
child writes it), each for two numbers of steps; the difference of the two runs' totals over the
difference of their steps is the instructions per step, start-up and the phases' one-off work
left out. Only the training thread is counted (``--separate-threads``), with a fixed hash seed and
without address randomisation: the plain step measured 4.180, 4.180, 4.178 and 4.177 M
instructions in separate runs over two days.

With ``--ranks 2`` the job is a DDP job over gloo launched by torchrun, each rank under
callgrind, and each rank's training thread is counted: the capture's work in a rank (its hooks
around DDP's, the collectives watch, the step log) beside the plain rank's. A rank's training
thread also waits for gloo's all-reduce, and a wait that polls counts instructions that depend
on timing: the two ranks' figures differ by a few thousand.

    PYTHONPATH=src python benchmarks/capture_instructions.py [--src DIR] [--steps 100,300]
        [--ranks 2]

Needs valgrind (``apt-get install valgrind``); a run takes a few minutes (one process: the runs
go two at a time). ``--src`` measures the torchdoctor package in another checkout's ``src`` as
well, beside this one's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The job's loop, plain or captured (``argv``: mode, steps, step log path). The capture is
#: installed before the script's objects are built, as a supervised run's child installs it;
#: under torchrun (``WORLD_SIZE`` set) the model is wrapped in DDP over gloo.
JOB = """
import os, sys, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
torch.manual_seed(0)
mode, steps, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
distributed = "WORLD_SIZE" in os.environ
session = None
if mode == "captured":
    from torchdoctor.capture import CaptureSession, parts_from_marks
    from torchdoctor.options import RunOptions
    from torchdoctor.process.stream import StepLog

    log = StepLog(f"{log_path}.{os.environ.get('RANK', '0')}", capacity=4096)

    def listen(event, session, phase, step):  # a supervised child's step log
        if event == "step" and phase.measuring:
            log.append(phase.name, step.batches, parts_from_marks(step.marks),
                       step.marks[0].host_ns)

    options = RunOptions(steps=10**6, warmup=3, stop=False, sync_steps=0, counterfactuals=False)
    session = CaptureSession(options, listener=listen)
    session.install()
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                      nn.Linear(256, 10))
if distributed:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(model)
data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
loader = DataLoader(data, batch_size=32, shuffle=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
it = iter(loader)
for _ in range(20 + steps):
    try:
        x, y = next(it)
    except StopIteration:
        it = iter(loader)
        x, y = next(it)
    x, y = x.to("cpu", non_blocking=True), y.to("cpu", non_blocking=True)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
if session is not None:
    session.uninstall()
if distributed:
    dist.barrier()
    dist.destroy_process_group()
"""


def start(
    tmp: Path, src: Path, mode: str, steps: int, tag: str, ranks: int
) -> tuple[subprocess.Popen, list[Path]]:
    """The job under callgrind, as one process or as ``ranks`` ranks launched by torchrun (each
    rank's program is valgrind); the output files of each rank's training thread."""
    out = tmp / f"cg.{tag}.{mode}.{steps}"
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONHASHSEED": "0"}
    valgrind = ["setarch", "-R", "valgrind", "--tool=callgrind", "--separate-threads=yes",
                f"--callgrind-out-file={out}.%q{{RANK}}", sys.executable]  # fmt: skip
    job = [str(tmp / "job.py"), mode, str(steps), str(tmp / f"steplog.{tag}.{mode}.{steps}")]
    cmd = [*valgrind, *job]
    if ranks > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}", "--no-python", *cmd]  # fmt: skip
    else:
        env["RANK"] = "0"  # names the output file only: WORLD_SIZE stays unset
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, [Path(f"{out}.{r}-01") for r in range(ranks)]  # thread 1: the training thread


def _wait(name: str, runs: list[tuple[subprocess.Popen, list[Path]]]) -> None:
    """Wait for every run; when one fails, stop the others and say so."""
    for proc, _ in runs:
        if proc.wait() != 0:
            for other, _ in runs:
                other.kill()
            raise SystemExit(f"{name}: the run ended with status {proc.returncode}")


def total(path: Path) -> int:
    """The instructions a callgrind output file counted (its ``totals:`` or ``summary:`` line)."""
    for line in path.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise SystemExit(f"{path}: no totals line (did valgrind fail?)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, help="also measure the torchdoctor package in DIR")
    parser.add_argument("--steps", default="100,300", help="the two step counts (after 20)")
    parser.add_argument(
        "--ranks", type=int, default=1, choices=(1, 2),
        help="1: one process; 2: a DDP job over gloo launched by torchrun, each rank counted",
    )  # fmt: skip
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        raise SystemExit("needs valgrind and setarch: apt-get install valgrind util-linux")
    low, high = (int(n) for n in args.steps.split(","))
    variants = [("plain", ROOT / "src", "plain"), ("this checkout", ROOT / "src", "captured")]
    if args.src is not None:
        variants.append((f"captured ({args.src})", args.src.resolve(), "captured"))
    per_step: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "job.py").write_text(JOB)
        for i, (name, src, mode) in enumerate(variants):
            print(f"{name}: {low} and {high} steps under callgrind ...", flush=True)
            runs = []
            for n in (low, high):
                runs.append(start(tmp, src, mode, n, str(i), args.ranks))
                if args.ranks > 1:  # a job fills the cores: one at a time
                    _wait(name, runs)
            _wait(name, runs)  # one process: both step counts at once
            (_, few), (_, many) = runs
            per_step[name] = [(total(b) - total(a)) / (high - low) for a, b in zip(few, many)]
    plain = per_step.pop("plain")
    where = (lambda r: "") if args.ranks == 1 else (lambda r: f", rank {r}")
    for r, n in enumerate(plain):
        print(f"plain step{where(r)}: {n / 1e6:.3f} M instructions (the training thread)")
    for name, counts in per_step.items():
        for r, (n, base) in enumerate(zip(counts, plain)):
            print(f"{name}{where(r)}: {n / 1e6:.3f} M per step, capture's "
                  f"{(n - base) / 1e3:+.1f} k ({(n - base) / base:+.1%} of the plain step)")  # fmt: skip


if __name__ == "__main__":
    main()
