"""The job the observer-effect benchmark runs: a small MLP trained from a DataLoader that times
its own steps.

Each whole step (drawing the batch, forward, backward, the optimizer) is timed with
``perf_counter`` and appended to ``--timing-file``.RANK, so the same clock judges the step plain
and under torchdoctor; beside it, the CPU time the training thread spent in the step
(``time.thread_time``: torchdoctor's hooks run on that thread on the CPU, waiting for a peer
costs none; on a GPU, backward runs on autograd's own thread, which this leaves out). Under torchrun (``WORLD_SIZE`` set) the model is wrapped in DDP over gloo.

    python benchmarks/_timed_job.py --timing-file /tmp/t --threads 1 [--device cuda]

On an accelerator (``--device``) the batches are copied to it each step and nothing waits for
the device: the host's clock then times the step as the script's own loop would see it.
"""

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--timing-file", required=True, help="step times (ms) go to PATH.RANK")
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--device", default="cpu", help="where the model trains (cpu, cuda, ...)")
args = parser.parse_args()

if args.threads:
    torch.set_num_threads(args.threads)
distributed = "WORLD_SIZE" in os.environ
rank = 0
device = torch.device(args.device)
torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
    nn.Linear(args.hidden, 10),
).to(device)  # fmt: skip
if distributed:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(model)
data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
loader = DataLoader(data, batch_size=32, shuffle=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
with open(f"{args.timing_file}.{rank}", "w") as timing:
    step = 0
    last, last_cpu = time.perf_counter(), time.thread_time()
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            now, cpu = time.perf_counter(), time.thread_time()
            timing.write(f"{(now - last) * 1000:.4f} {(cpu - last_cpu) * 1000:.4f}\n")
            last, last_cpu = now, cpu
            step += 1
            if step == args.steps:
                break
if distributed:
    dist.barrier()  # both ranks done before the group goes (a rank aborted in gloo without it)
    dist.destroy_process_group()
