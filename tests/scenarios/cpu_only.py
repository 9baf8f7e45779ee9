"""A script written for a laptop: no `.to(device)` anywhere, so its batches never move.

With ``--checks`` it does, per step, what would block on an accelerator once the script moves
to a GPU box: an assert on the labels, a branch on a tensor, `.item()` on a batch statistic and
Python indexing of a batch tensor. Without it, the loop is clean.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--checks", action="store_true")
args = parser.parse_args()

NUM_CLASSES = 4
torch.manual_seed(0)
dataset = TensorDataset(torch.randn(256, 16), torch.randint(0, NUM_CLASSES, (256,)))
loader = DataLoader(dataset, batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, NUM_CLASSES))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

for epoch in range(100):
    for x, target in loader:
        if args.checks:
            assert target.max() < NUM_CLASSES  # expect: tensor-assert
            if (target == 0).all():  # expect: tensor-branch
                continue
            mean_label = target.float().mean().item()  # expect: item
            first = x[[0, 1]]  # expect: python-index
        loss = nn.functional.cross_entropy(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
