"""A nanoGPT-style trainer: token batches sliced from a memory-mapped array, no DataLoader.

``get_batch`` builds each batch itself, like nanoGPT's ``train.py``, and the loop fetches the
next batch right after the forward pass (the prefetch pattern). Runs on the CPU with a tiny model.
"""

import argparse
import os
import tempfile

import numpy as np
import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--data", default=None, help="folder for the token file (default: a new one)")
parser.add_argument("--max-iters", type=int, default=200)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
block_size, batch_size, vocab_size = 16, 8, 64

# The token file nanoGPT's prepare.py writes: uint16 tokens, read back with np.memmap.
path = os.path.join(args.data or tempfile.mkdtemp(), "train.bin")
np.random.default_rng(0).integers(0, vocab_size, 20_000, dtype=np.uint16).tofile(path)


def get_batch():
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i : i + block_size]).astype(np.int64)) for i in ix])
    y = torch.stack(
        [torch.from_numpy((data[i + 1 : i + 1 + block_size]).astype(np.int64)) for i in ix]
    )
    if device_type == "cuda":
        x, y = (
            x.pin_memory().to(device, non_blocking=True),
            y.pin_memory().to(device, non_blocking=True),
        )
    else:
        x, y = x.to(device), y.to(device)
    return x, y


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, 32)
        self.pos = nn.Embedding(block_size, 32)
        self.block = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, vocab_size)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        logits = self.head(self.block(self.tok(idx) + self.pos(pos)))
        loss = None
        if targets is not None:
            loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


model = TinyGPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
max_iters = args.max_iters

X, Y = get_batch()  # fetch the very first batch
for it in range(max_iters):
    logits, loss = model(X, Y)
    X, Y = get_batch()  # the next batch, fetched while the device works on this step
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
print("done")
