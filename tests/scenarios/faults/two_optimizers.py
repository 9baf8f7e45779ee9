"""A GAN-like loop: two optimizers step in turn every iteration."""

import torch
from torch import nn

gen, disc = nn.Linear(4, 4), nn.Linear(4, 1)
opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
for _ in range(400):
    disc(gen(torch.randn(8, 4)).detach()).sum().backward()
    opt_d.step()
    opt_d.zero_grad()
    disc(gen(torch.randn(8, 4))).sum().backward()
    opt_g.step()
    opt_g.zero_grad()
