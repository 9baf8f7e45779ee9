"""The shape of a loop that reports its training loss by reading a few batches of the *training*
loader again, under ``torch.no_grad()``, every few steps: a helper iterates the loader and
breaks (LLMs-from-scratch's chapter 5 has this shape). Written here, for torchdoctor's tests."""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--eval-every", type=int, default=5)
parser.add_argument("--eval-batches", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
train_loader = DataLoader(
    TensorDataset(torch.randn(320, 16), torch.randint(0, 4, (320,))), batch_size=16, shuffle=True
)
val_loader = DataLoader(
    TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=16
)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)


def mean_loss(loader, batches):
    total = 0.0
    for i, (x, y) in enumerate(loader):
        if i >= batches:
            break
        total += nn.functional.cross_entropy(model(x), y).item()
    return total / batches


def evaluate():
    model.eval()
    with torch.no_grad():
        losses = (
            mean_loss(train_loader, args.eval_batches),
            mean_loss(val_loader, args.eval_batches),
        )
    model.train()
    return losses


step = 0
for _epoch in range(args.epochs):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        step += 1
        if step % args.eval_every == 0:
            evaluate()
