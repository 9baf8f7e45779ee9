"""A GPT-style trainer fed without a DataLoader: `get_batch` slices random windows of a token file.

The shape of the most-read small GPT trainers: the tokens sit in a numpy memmap, each batch is
stacked from random windows, pinned and moved with `non_blocking=True` where there is a device,
and the next batch is fetched right after the forward pass; gradients are accumulated over
`--accumulate` micro-steps per optimizer step. `--build-ms` adds a fixed cost to every batch.
"""

import argparse
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--accumulate", type=int, default=2)
parser.add_argument("--build-ms", type=float, default=0.0)
parser.add_argument("--block", type=int, default=32)
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
vocab = 256
path = os.path.join(tempfile.mkdtemp(), "train.bin")
np.random.default_rng(0).integers(0, vocab, 100_000, dtype=np.uint16).tofile(path)
data = np.memmap(path, dtype=np.uint16, mode="r")


def get_batch():
    if args.build_ms:
        time.sleep(args.build_ms / 1000)  # a costly batch: decoding, augmenting, a slow disk
    ix = torch.randint(len(data) - args.block, (args.batch,))
    x = torch.stack([torch.from_numpy(data[i : i + args.block].astype(np.int64)) for i in ix])
    y = torch.stack(
        [torch.from_numpy(data[i + 1 : i + 1 + args.block].astype(np.int64)) for i in ix]
    )
    if device == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(
            device, non_blocking=True
        )
    return x.to(device), y.to(device)


class TinyGPT(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True, dropout=0.0)
        self.blocks = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets):
        logits = self.head(self.blocks(self.emb(idx)))
        return logits, nn.functional.cross_entropy(logits.view(-1, vocab), targets.view(-1))


model = TinyGPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
X, Y = get_batch()
for it in range(args.iters):
    for micro in range(args.accumulate):
        logits, loss = model(X, Y)
        loss = loss / args.accumulate
        X, Y = get_batch()  # fetch the next batch while the device works
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if it % 50 == 0:
        print(f"iter {it} loss {loss.item() * args.accumulate:.3f}")
print("done")
