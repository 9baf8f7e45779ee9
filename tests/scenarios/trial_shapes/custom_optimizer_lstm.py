"""An LSTM language-model step with a plain optimizer class (not torch.optim): zero_grad and a
hand-written SGD step; the loss is a module (``lf``) and the model is called ``m``."""

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)


class PlainSGD:
    def __init__(self, params, lr):
        self.params, self.lr = list(params), lr

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for p in self.params:
            p.add_(p.grad, alpha=-self.lr)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.rnn = nn.LSTM(32, 64, batch_first=True)
        self.head = nn.Linear(64, 50)

    def forward(self, x):
        out, _ = self.rnn(self.embed(x))
        return self.head(out)


m = LM()
lf = nn.CrossEntropyLoss()
opt = PlainSGD(m.parameters(), lr=0.1)
data = torch.randint(0, 50, (4096, 17))
for i in range(100000):
    batch = data[(i * 8) % 4000 : (i * 8) % 4000 + 8]
    x, y = batch[:, :-1], batch[:, 1:]
    opt.zero_grad()
    loss = lf(m(x).reshape(-1, 50), y.reshape(-1))
    loss.backward()
    opt.step()
