"""A word-level LSTM language model trained by hand: no torch.optim, the update is `p.data.add_`.

The shape of the classic RNN language-model examples: the corpus is one long tensor cut into
`bptt`-long slices by `get_batch`, the hidden state is detached between batches, gradients are
cleared with `model.zero_grad()`, clipped, and applied parameter by parameter.
"""

import argparse
import math
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--tokens", type=int, default=60_000)
parser.add_argument("--bptt", type=int, default=35)
parser.add_argument("--accumulate", type=int, default=1, help="backwards per update")
args = parser.parse_args()

torch.manual_seed(0)
ntokens, batch_size, lr, clip = 1000, 20, 20.0, 0.25
corpus = torch.randint(ntokens, (args.tokens,))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


train_data = batchify(corpus, batch_size)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp=64, nhid=64, nlayers=2):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(output).view(-1, self.decoder.out_features), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


model = RNNModel(ntokens)
criterion = nn.CrossEntropyLoss()


def train():
    model.train()
    total_loss, start = 0.0, time.time()
    hidden = model.init_hidden(batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
        hidden = repackage_hidden(hidden)
        if batch % args.accumulate == 0:
            model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        if (batch + 1) % args.accumulate == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
        if batch % 50 == 49:
            cur = total_loss / 50
            print(
                f"batch {batch + 1} loss {cur:.2f} ppl {math.exp(cur):.1f} {time.time() - start:.1f}s"
            )
            total_loss = 0.0


for epoch in range(args.epochs):
    train()
print("done")
