"""timm's loader shape: a prefetching wrapper around a DataLoader that normalises the batch as
a whole (on a side stream on a GPU; here with plain tensor ops), with uint8 samples made by a
costly per-sample decode (``--decode-ms``) in two workers."""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--decode-ms", type=float, default=6.0)
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--epochs", type=int, default=50)
args = parser.parse_args()
torch.set_num_threads(1)


class Decoded(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(args.decode_ms / 1000)
        return torch.full((3, 8, 8), i % 256, dtype=torch.uint8), i % 10


class PrefetchLoader:
    def __init__(self, loader, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)):
        self.loader = loader
        self.mean = torch.tensor([x * 255 for x in mean]).view(1, 3, 1, 1)
        self.std = torch.tensor([x * 255 for x in std]).view(1, 3, 1, 1)

    def __iter__(self):
        first = True
        inputs = target = None
        for next_input, next_target in self.loader:
            next_input = next_input.float().sub_(self.mean).div_(self.std)
            if not first:
                yield inputs, target
            else:
                first = False
            inputs, target = next_input, next_target
        yield inputs, target

    def __len__(self):
        return len(self.loader)


def main():
    loader = PrefetchLoader(
        DataLoader(Decoded(), batch_size=8, shuffle=True, num_workers=args.workers)
    )
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(args.epochs):
        for inputs, target in loader:
            loss = loss_fn(model(inputs), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
