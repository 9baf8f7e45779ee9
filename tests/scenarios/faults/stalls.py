"""Trains 12 steps, then stalls (a wait that never returns): only the wall-time bound ends it,
and the record says where the script was then."""

import os
import time

import torch
from torch import nn

pidfile = os.environ.get("TORCHDOCTOR_TEST_PIDFILE")
if pidfile:
    with open(pidfile, "w") as fh:
        fh.write(str(os.getpid()))
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1000):
    if step == 12:
        time.sleep(3600)  # the stall
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
