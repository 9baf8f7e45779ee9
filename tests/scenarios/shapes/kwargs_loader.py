"""pytorch/examples' ``mnist/main.py`` shape: the loaders' settings in dicts passed as
``DataLoader(dataset, **train_kwargs)``, merged with the accelerator's (``num_workers``,
``pin_memory``, ...) only where one is found. On the CPU the training loader has no workers and
slow samples: ``fix`` must follow ``**train_kwargs`` to its dict literal."""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--getitem-ms", type=float, default=4.0)
args = parser.parse_args()
torch.manual_seed(0)


class Slow(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(args.getitem_ms / 1000)
        return torch.randn(16), i % 4


def main():
    use_accel = torch.accelerator.current_accelerator() is not None
    train_kwargs = {'batch_size': args.batch_size}  # fmt: skip
    test_kwargs = {'batch_size': 64}  # fmt: skip
    if use_accel:
        accel_kwargs = {'num_workers': 1,
                        'persistent_workers': True,
                        'pin_memory': True,
                        'shuffle': True}  # fmt: skip
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)
    train_loader = DataLoader(Slow(), **train_kwargs)
    DataLoader(Slow(), **test_kwargs)
    model = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(100):
        for x, y in train_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
