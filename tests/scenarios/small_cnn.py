"""A small CNN on 32x32 images held in memory: a compute-bound loop for the trials."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()
torch.manual_seed(0)


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


model = nn.Sequential(
    block(3, 32), block(32, 32), nn.MaxPool2d(2), block(32, 64), block(64, 64), nn.MaxPool2d(2),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
)  # fmt: skip
data = torch.utils.data.TensorDataset(torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,)))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(1000):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
