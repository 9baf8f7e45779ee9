"""Swallows every exception, torchdoctor's stop included, and keeps training forever."""

import os

import torch
from torch import nn

pidfile = os.environ.get("TORCHDOCTOR_TEST_PIDFILE")
if pidfile:
    with open(pidfile, "w") as fh:
        fh.write(str(os.getpid()))
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
while True:
    try:
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    except BaseException:  # noqa: BLE001 - the point of this scenario
        pass
