"""A tiny training loop the fault scenarios share: ``steps()`` yields after each optimizer step.

Each scenario writes its process id next to the record (``TORCHDOCTOR_TEST_PIDFILE``), so a
test can check that the script's process is gone after the run, whatever ended it.
"""

import os

import torch
from torch import nn


def steps():
    pidfile = os.environ.get("TORCHDOCTOR_TEST_PIDFILE")
    if pidfile:
        with open(pidfile, "w") as fh:
            fh.write(str(os.getpid()))
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    i = 0
    while True:
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        yield i
        i += 1
