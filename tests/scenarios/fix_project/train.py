"""Trains a small MLP on data.py's slow samples: input-bound until the loader gets workers."""

import torch
from torch import nn

from data import make_loader

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = make_loader()

for epoch in range(100):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
