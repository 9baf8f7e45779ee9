"""A plain training loop with injectable costs, used by the tests as a user's script.

Costs are injected with sleeps so each bottleneck is unambiguous on any machine.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--getitem-ms", type=float, default=0.0)
parser.add_argument("--forward-ms", type=float, default=0.0)
parser.add_argument("--host-ms", type=float, default=0.0)
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--persistent", action="store_true")
parser.add_argument("--epochs", type=int, default=100)
parser.add_argument("--dataset-len", type=int, default=64)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--swallow", action="store_true", help="wrap each step in try/except Exception")
parser.add_argument("--closure", action="store_true", help="optimizer.step(closure), like LBFGS")
parser.add_argument("--accumulate", type=int, default=1)
parser.add_argument(
    "--transform-ms", type=float, default=0.0, help="cost of the 2nd of 3 Compose transforms"
)
parser.add_argument("--tag", default="", help="ignored; lets a test find this run's processes")
args = parser.parse_args()


class Compose:
    """A user's own Compose, shaped like torchvision's."""

    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class Jitter:
    def __call__(self, x):
        return x + 0.01


class SlowResize:
    def __init__(self, cost_ms):
        self.cost_s = cost_ms / 1000

    def __call__(self, x):
        time.sleep(self.cost_s)
        return x * 1.0


class Clip:
    def __call__(self, x):
        return x.clamp(-3, 3)


class SlowDataset(Dataset):
    def __init__(self, n, cost_ms, transform_ms=0.0):
        self.x = torch.randn(n, 16)
        self.y = torch.randint(0, 4, (n,))
        self.cost_s = cost_ms / 1000
        self.transform = (
            Compose([Jitter(), SlowResize(transform_ms), Clip()]) if transform_ms else None
        )

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.cost_s:
            time.sleep(self.cost_s)
        x = self.x[i]
        if self.transform is not None:
            x = self.transform(x)
        return x, self.y[i]


class Model(nn.Module):
    def __init__(self, cost_ms):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.cost_s = cost_ms / 1000

    def forward(self, x):
        if self.cost_s:
            time.sleep(self.cost_s)
        return self.net(x)


loader = DataLoader(
    SlowDataset(args.dataset_len, args.getitem_ms, args.transform_ms),
    batch_size=args.batch_size,
    shuffle=True,
    num_workers=args.workers,
    persistent_workers=args.persistent and args.workers > 0,
)
model = Model(args.forward_ms)
loss_fn = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def host_work():
    if args.host_ms:
        time.sleep(args.host_ms / 1000)


for epoch in range(args.epochs):
    for i, (x, y) in enumerate(loader):
        try:
            if args.closure:

                def closure():
                    opt.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    return loss

                opt.step(closure)
            else:
                loss = loss_fn(model(x), y) / args.accumulate
                loss.backward()
                if (i + 1) % args.accumulate == 0:
                    opt.step()
                    opt.zero_grad()
            host_work()
        except Exception as exc:
            if not args.swallow:
                raise
            print("swallowed", exc)
print("training finished")
