"""A loop whose forward is slowed while the optimizer's multi-tensor step is on, or while it is
off: as if load came or went exactly while the foreach trial ran. The optimizer is a sliver of
the step, so no speedup or loss this large can be the trial's (``--slow-while trial|baseline``;
the slowing is a sleep, the same beside a busy process)."""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--slow-while", choices=("trial", "baseline"), required=True)
parser.add_argument("--slow-ms", type=float, default=40.0)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        group = opt.param_groups[0]
        trial_on = bool(group.get("foreach") or group.get("fused"))
        if trial_on == (args.slow_while == "trial"):
            time.sleep(args.slow_ms / 1000.0)
        return self.body(x)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
for step in range(100000):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
