"""The shape of a loop that builds its Dataset and DataLoader anew every epoch (a curriculum, a
re-shuffled file list), or only its DataLoader over one Dataset (``--same-dataset``), with
workers. Written here, for torchdoctor's tests."""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batches", type=int, default=12)
parser.add_argument("--same-dataset", action="store_true", help="only the DataLoader built anew")
parser.add_argument("--init-s", type=float, default=0.0, help="each worker's start takes this")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)


class Points(Dataset):
    def __init__(self, n, epoch):
        g = torch.Generator().manual_seed(epoch)
        self.x = torch.randn(n, 16, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def slow_init(worker_id):
    time.sleep(args.init_s)


model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = Points(16 * args.batches, 0)
for epoch in range(args.epochs):
    dataset = data if args.same_dataset else Points(16 * args.batches, epoch)
    loader = DataLoader(
        dataset, batch_size=16, shuffle=True, num_workers=1, worker_init_fn=slow_init
    )
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
