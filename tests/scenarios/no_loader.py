"""A GPT-style loop: batches sliced from an array, no DataLoader."""

import sys
import time

import numpy as np
import torch
from torch import nn

host_ms = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
data = np.arange(10_000, dtype=np.int64) % 50
model = nn.Sequential(nn.Embedding(50, 16), nn.Flatten(), nn.Linear(16 * 8, 50))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def get_batch():
    if host_ms:
        time.sleep(host_ms / 1000)
    ix = np.random.randint(0, len(data) - 9, size=8)
    x = torch.from_numpy(np.stack([data[i : i + 8] for i in ix]))
    y = torch.from_numpy(np.stack([data[i + 8] for i in ix]))
    return x, y


for it in range(1000):
    x, y = get_batch()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
