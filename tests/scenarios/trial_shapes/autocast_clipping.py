"""A loop that already runs forward and loss under torch.autocast (``--dtype``, bf16 by default;
float16 with a GradScaler when asked), with gradient clipping and AdamW; the DataLoader is built
in the ``for`` statement every epoch; the loss is a module called ``lf``, the model ``m``."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
parser.add_argument("--no-autocast", action="store_true")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)

dataset = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
m = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
lf = nn.CrossEntropyLoss()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
dtype = getattr(torch, args.dtype)
scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
for epoch in range(1000):
    for x, y in DataLoader(dataset, batch_size=8, shuffle=True):
        with torch.autocast("cpu", dtype=dtype, enabled=not args.no_autocast):
            loss = lf(m(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
