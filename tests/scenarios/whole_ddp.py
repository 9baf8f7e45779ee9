"""A DDP job (gloo) whose rank 0 saves a checkpoint every N steps in its own save function, while
the other ranks wait for it in their next step's all-reduce: ``run --whole``'s job test."""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--save-every", type=int, default=20)
parser.add_argument("--save-s", type=float, default=0.4)
parser.add_argument("--out", default=os.devnull)
args = parser.parse_args()


def save_checkpoint(model, path):
    time.sleep(args.save_s)  # gathering the state
    torch.save(model.state_dict(), path)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4)))
    data = TensorDataset(torch.randn(2048, 32), torch.randint(0, 4, (2048,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            time.sleep(0.004)
            step += 1
            if step % args.save_every == 0 and rank == 0:
                save_checkpoint(model, args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
