"""torchvision-style ``nn.Module`` transforms in the Dataset (the shape of pytorch/examples
mnist and super_resolution, and timm's train.py): ``Normalize`` and a costly blur are modules
called in ``__getitem__``, in DataLoader workers (``--workers 2``) or in the main process (0).

The blur's cost is a sleep (``--blur-ms`` per sample), so the input pipeline bounds the run by a
margin no busy machine can hide (the ground truth: 8 samples x 4 ms against a model step well
under a millisecond). ``--log-every N`` prints ``loss.item()`` every N steps; ``--spawn`` starts
the workers with spawn.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--blur-ms", type=float, default=4.0)
parser.add_argument("--epochs", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--log-every", type=int, default=0, help="print loss.item() every N steps")
parser.add_argument("--spawn", action="store_true", help="workers started with spawn, not fork")
args = parser.parse_args()
torch.set_num_threads(1)


class Blur(nn.Module):
    def forward(self, x):
        time.sleep(args.blur_ms / 1000)
        return x


class Normalize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean, self.std = mean, std

    def forward(self, x):
        return (x - self.mean) / self.std


class Images(Dataset):
    def __init__(self):
        self.transform = nn.Sequential(Blur(), Normalize(0.5, 0.25))

    def __len__(self):
        return 256

    def __getitem__(self, i):
        image = torch.full((1, 8, 8), (i % 256) / 255.0)
        return self.transform(image), i % 10


model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()

if __name__ == "__main__":
    context = "spawn" if args.spawn and args.workers else None
    loader = DataLoader(
        Images(),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        multiprocessing_context=context,
    )
    for epoch in range(args.epochs):
        for i, (images, labels) in enumerate(loader):
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            if args.log_every and i % args.log_every == 0:
                print(f"epoch {epoch} batch {i} loss {loss.item():.3f}")
    print("trained", epoch + 1, "epochs")
