"""A compute-bound loop for the trials: an MLP fed tiny batches from memory (no input cost).

``--graph-break`` adds a data-dependent branch in forward (a graph break for torch.compile) at
the line marked BRANCH; ``--conv`` makes it a small CNN (for channels_last); ``--step-cost-ms``
adds a fixed cost to every step that does not grow with the batch (a sleep, as a launch or a log
call would: it stays the same beside a busy process); ``--threads N`` sets torch's threads.
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--graph-break", action="store_true")
parser.add_argument("--conv", action="store_true")
parser.add_argument("--step-cost-ms", type=float, default=0.0)
parser.add_argument("--threads", type=int, default=0)
args = parser.parse_args()
if args.threads:
    torch.set_num_threads(args.threads)
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = (
            nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(512, 64)
            )
            if args.conv
            else nn.Sequential(nn.Linear(64, 256), nn.ReLU())
        )
        self.head = nn.Linear(256 if not args.conv else 64, 10)

    def forward(self, x):
        h = self.body(x)
        if args.graph_break and h.sum() > 0:  # BRANCH
            h = h * 1.0
        return self.head(h)


shape = (3, 8, 8) if args.conv else (64,)
data = torch.utils.data.TensorDataset(torch.randn(4096, *shape), torch.randint(0, 10, (4096,)))
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(1000):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if args.step_cost_ms:
            time.sleep(args.step_cost_ms / 1000)
