"""A script that runs torch.profiler itself around its steps (the shape of nanoGPT's bench.py):
the profiler records from the third step on, during the steps torchdoctor measures."""

import argparse

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()
torch.set_num_threads(1)

model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
with profile(
    activities=[ProfilerActivity.CPU],
    schedule=schedule(wait=2, warmup=1, active=args.steps),
    on_trace_ready=lambda prof: None,
) as prof:
    for _ in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        prof.step()
