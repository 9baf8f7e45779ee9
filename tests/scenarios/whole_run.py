"""A training run with costs of known size outside its steps, for ``run --whole``'s tests.

Each cost is a sleep in the script's own code, sized by a flag, so each kind of the whole run's
accounts can be checked against what was put there: a slow indexing function at startup, a
worker_init_fn (workers started again every epoch), an evaluation pass per epoch, a save function
that works before torch.save, and a metric flush every N steps.
"""

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batches", type=int, default=40)
parser.add_argument("--index-s", type=float, default=0.0)
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--init-s", type=float, default=0.0)
parser.add_argument("--eval-batches", type=int, default=0)
parser.add_argument("--eval-s", type=float, default=0.0)
parser.add_argument("--save-s", type=float, default=-1.0, help="-1: no save")
parser.add_argument("--flush-every", type=int, default=0)
parser.add_argument("--flush-s", type=float, default=0.0)
parser.add_argument("--step-s", type=float, default=0.004)
parser.add_argument("--out", default=os.devnull)
parser.add_argument("--count-file", help="the steps taken so far, rewritten at each step")
args = parser.parse_args()


class Points(Dataset):
    def __init__(self, n):
        self.x = torch.randn(n, 32)
        self.y = torch.randint(0, 4, (n,))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def index_dataset(n):
    time.sleep(args.index_s)  # reading and indexing the data's files
    return Points(n)


def slow_init(worker_id):
    time.sleep(args.init_s)


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            if i == args.eval_batches:
                break
            model(x)
            time.sleep(args.eval_s)  # metrics of the batch
    model.train()


def save_checkpoint(model, optimizer, path):
    time.sleep(args.save_s)  # gathering the state
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def flush_metrics(values):
    time.sleep(args.flush_s)  # writing the metrics out
    values.clear()


def main():
    data = index_dataset(16 * args.batches)
    train = DataLoader(
        data,
        batch_size=16,
        shuffle=True,
        num_workers=args.workers,
        worker_init_fn=slow_init if args.workers else None,
    )
    val = DataLoader(Points(64 * 8), batch_size=64)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step, metrics = 0, []
    for _ in range(args.epochs):
        for x, y in train:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            time.sleep(args.step_s)  # the rest of a real step
            metrics.append(loss.detach())
            step += 1
            if args.count_file:  # whole or not at all: a Ctrl-C between open and write
                with open(args.count_file + ".new", "w") as counted:  # left it empty
                    counted.write(str(step))
                os.replace(args.count_file + ".new", args.count_file)
            if args.flush_every and step % args.flush_every == 0:
                flush_metrics(metrics)
        if args.eval_batches:
            evaluate(model, val)
        if args.save_s >= 0:
            save_checkpoint(model, optimizer, args.out)


if __name__ == "__main__":
    main()
