"""Runs the model forever and never trains (no batches drawn, no backward, no optimizer): no step
boundary is ever found, so only the wall-time bound ends it."""

import os

import torch
from torch import nn

pidfile = os.environ.get("TORCHDOCTOR_TEST_PIDFILE")
if pidfile:
    with open(pidfile, "w") as fh:
        fh.write(str(os.getpid()))
model = nn.Linear(4, 1)
while True:
    with torch.no_grad():
        model(torch.randn(8, 4)).sum()
