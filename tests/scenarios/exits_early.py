"""Makes a few optimizer steps, then calls sys.exit(0)."""

import sys

import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(sys.argv[1])):
    loss = model(torch.randn(8, 4)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
sys.exit(0)
