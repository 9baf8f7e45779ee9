"""A small transformer language model on random tokens: a compute-bound loop for the trials."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--seq", type=int, default=64)
parser.add_argument("--dim", type=int, default=128)
args = parser.parse_args()
torch.manual_seed(0)
VOCAB = 1000


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, args.dim)
        layer = nn.TransformerEncoderLayer(args.dim, 4, 4 * args.dim, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(args.dim, VOCAB)

    def forward(self, tokens):
        return self.out(self.blocks(self.embed(tokens)))


tokens = torch.randint(0, VOCAB, (2048, args.seq + 1))
data = torch.utils.data.TensorDataset(tokens[:, :-1], tokens[:, 1:])
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
for epoch in range(1000):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
