"""timm's ``train.py`` shape: a wrapper loader (timm's PrefetchLoader: ``__iter__`` over an inner
DataLoader, ``__len__`` its length) and gradient accumulation whose arithmetic trusts
``len(loader)``. With ``len(loader) % accum == 0`` the last accumulation group is 0 long, so a
pass that yields more batches than ``len(loader)`` divides by zero, as timm's did."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=400)
parser.add_argument("--accum", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)


class PrefetchLoader:
    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        for inputs, target in self.loader:
            yield inputs.float(), target

    def __len__(self):
        return len(self.loader)


def train_one_epoch(model, loader, optimizer, loss_fn):
    accum_steps = args.accum
    last_accum_steps = len(loader) % accum_steps
    last_batch_idx = len(loader) - 1
    last_batch_idx_to_accum = len(loader) - last_accum_steps
    seen = 0
    for batch_idx, (inputs, target) in enumerate(loader):
        last_batch = batch_idx == last_batch_idx
        need_update = last_batch or (batch_idx + 1) % accum_steps == 0
        if batch_idx >= last_batch_idx_to_accum:
            accum_steps = last_accum_steps
        loss = loss_fn(model(inputs), target) / accum_steps
        loss.backward()
        if need_update:
            optimizer.step()
            optimizer.zero_grad()
        seen += 1
    assert seen <= len(loader), f"{seen} batches from a loader of {len(loader)}"


def main():
    data = TensorDataset(torch.randn(48, 32), torch.randint(0, 10, (48,)))
    loader = PrefetchLoader(DataLoader(data, batch_size=8, shuffle=True))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(args.epochs):
        train_one_epoch(model, loader, optimizer, loss_fn)
    print("done")


if __name__ == "__main__":
    main()
