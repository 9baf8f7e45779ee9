"""Takes a stray optimizer step, then re-creates the optimizer and trains with the new one."""

import torch
from torch import nn

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt.step()  # a stray step before training (no gradients yet)
opt = torch.optim.SGD(model.parameters(), lr=0.1)  # the one that trains
for _ in range(400):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
