"""A small DDP training script launched by torchrun (gloo on CPU), used by the tests as a user's job.

Costs and mistakes are injected per rank so each case is unambiguous on a 2-core machine:
``--slow-rank R --getitem-ms X`` makes rank R's samples slow (a straggler); ``--raise-on-rank R``
makes rank R raise at step ``--raise-at``; the other switches make the mistakes the diagnosis
names (no DistributedSampler, accumulation without ``no_sync()``, ``find_unused_parameters``).
``--join`` runs each epoch under ``torch.distributed.algorithms.Join`` (with ``--rank1-samples``:
uneven inputs, handled); ``--save-every N --save-dir D`` saves a checkpoint every N steps (each
rank through ``torch.distributed.checkpoint``, or rank 0 alone with ``torch.save``) and appends
``step checksum`` of its parameters to ``D/saves.RANK``: every save's line must agree across ranks.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--getitem-ms", type=float, default=0.0)
parser.add_argument("--slow-rank", type=int, default=-1, help="only this rank's samples are slow")
parser.add_argument("--no-sampler", action="store_true")
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument("--find-unused", action="store_true")
parser.add_argument("--fsdp", action="store_true", help="FSDP2's fully_shard instead of DDP")
parser.add_argument(
    "--fsdp-keep", action="store_true", help="fully_shard(..., reshard_after_forward=False)"
)
parser.add_argument("--fsdp-bf16", action="store_true", help="a bf16 MixedPrecisionPolicy")
parser.add_argument("--raise-on-rank", type=int, default=-1)
parser.add_argument("--raise-at", type=int, default=3)
parser.add_argument("--exit-on-rank", type=int, default=-1, help="os._exit(3) at --raise-at")
parser.add_argument("--abort-on-rank", type=int, default=-1, help="os.abort() at --raise-at")
parser.add_argument("--hang-on-rank", type=int, default=-1, help="sleeps for an hour at --raise-at")
parser.add_argument(
    "--oom-on-rank", type=int, default=-1, help="asks the CPU allocator for 1 PiB at --raise-at"
)
parser.add_argument("--samples", type=int, default=512, help="samples of the data set")
parser.add_argument("--rank1-samples", type=int, help="rank 1's data set has this many samples")
parser.add_argument(
    "--manual-allreduce",
    action="store_true",
    help="no DDP: each gradient all-reduced by hand with dist.all_reduce",
)
parser.add_argument("--epochs", type=int, default=100)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--timing-file", help="each rank appends its step times (ms) to PATH.RANK")
parser.add_argument("--module-keyword", action="store_true", help="DDP(module=model), as Lightning")
parser.add_argument(
    "--gather-loss", action="store_true", help="all-gathers the loss every step, to log its mean"
)
parser.add_argument("--join", action="store_true", help="each epoch under Join([ddp])")
parser.add_argument("--save-every", type=int, default=0, help="a checkpoint every N steps")
parser.add_argument("--save-with", choices=("dcp", "torch"), default="dcp")
parser.add_argument("--save-dir", help="where the checkpoints and saves.RANK go")
parser.add_argument("--tag", default="", help="ignored; lets a test find this run's processes")
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
slow = args.slow_rank in (-2, rank)


class Samples(Dataset):
    def __len__(self):
        return args.rank1_samples if rank == 1 and args.rank1_samples else args.samples

    def __getitem__(self, i):
        if slow and args.getitem_ms:
            time.sleep(args.getitem_ms / 1000)
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), i % 4


model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 4))
if args.fsdp:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16) if args.fsdp_bf16 else None
    settings = {"reshard_after_forward": not args.fsdp_keep}
    if policy is not None:
        settings["mp_policy"] = policy
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, **settings)
    ddp = fully_shard(model, **settings)
elif args.manual_allreduce:
    ddp = model
    for p in model.parameters():
        dist.broadcast(p.data, 0)
else:
    if args.module_keyword:
        ddp = DDP(module=model, find_unused_parameters=args.find_unused)
    else:
        ddp = DDP(model, find_unused_parameters=args.find_unused)
data = Samples()
sampler = None if args.no_sampler else DistributedSampler(data)
loader = DataLoader(data, batch_size=8, sampler=sampler, shuffle=False)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
step = 0
timing = open(f"{args.timing_file}.{rank}", "w") if args.timing_file else None  # noqa: SIM115
last = time.perf_counter()


logged = []  # --gather-loss: the mean loss of every step, as a logger keeps it


def save(step):
    """A checkpoint of the replicas, and their checksum in saves.RANK (the replicas must agree)."""
    if args.save_with == "dcp":
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": ddp.state_dict()}, checkpoint_id=f"{args.save_dir}/ckpt-{step}")
    elif rank == 0:
        torch.save(ddp.state_dict(), f"{args.save_dir}/ckpt-{step}.pt")
    total = sum(float(p.detach().double().sum()) for p in ddp.parameters())
    with open(f"{args.save_dir}/saves.{rank}", "a") as log:
        log.write(f"{step} {total:.9f}\n")


def one_epoch():
    global step, last
    for i, (x, y) in enumerate(loader):
        if step == args.raise_at and rank == args.raise_on_rank:
            raise RuntimeError(f"rank {rank} failed on purpose at step {step}")
        if step == args.raise_at and rank == args.exit_on_rank:
            os._exit(3)
        if step == args.raise_at and rank == args.abort_on_rank:
            os.abort()
        if step == args.raise_at and rank == args.oom_on_rank:
            x = torch.empty(2**50, dtype=torch.uint8)  # a batch that does not fit
        if step == args.raise_at and rank == args.hang_on_rank:
            time.sleep(3600)  # the stall: the other ranks wait for it in the all-reduce
        loss = nn.functional.cross_entropy(ddp(x), y) / args.accumulate
        loss.backward()
        if args.gather_loss:  # a common logging line: its output is read
            losses = [torch.zeros(()) for _ in range(dist.get_world_size())]
            dist.all_gather(losses, loss.detach())
            logged.append(float(sum(losses)) / len(losses))
        if args.manual_allreduce:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
        if (i + 1) % args.accumulate == 0:
            opt.step()
            opt.zero_grad()
            step += 1
            if timing is not None:
                now = time.perf_counter()
                timing.write(f"{(now - last) * 1000:.4f}\n")
                timing.flush()
                last = now
            if args.save_every and step % args.save_every == 0:
                save(step)


for epoch in range(args.epochs):
    if sampler is not None:
        sampler.set_epoch(epoch)
    if args.join:
        from torch.distributed.algorithms import Join

        with Join([ddp]):
            one_epoch()
    else:
        one_epoch()
dist.destroy_process_group()
