"""L-BFGS with a closure (the shape of pytorch/examples time_sequence_prediction): each
``optimizer.step(closure)`` calls the closure (forward and backward) up to ``max_iter`` times,
so one training step holds many backward calls that clear their gradients in between."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--max-iter", type=int, default=20)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)

x = torch.linspace(0, 20, 400).reshape(4, 100, 1)
inputs, targets = torch.sin(x[:, :-1]), torch.sin(x[:, 1:])
model = nn.LSTM(1, 16, batch_first=True)
head = nn.Linear(16, 1)
params = list(model.parameters()) + list(head.parameters())
# No early stop on small gradients or changes: each step evaluates the closure --max-iter
# times or more, whatever the data (a test counts the calls).
optimizer = torch.optim.LBFGS(
    params, lr=0.5, max_iter=args.max_iter, tolerance_grad=0.0, tolerance_change=0.0
)
loss_fn = nn.MSELoss()

for i in range(args.steps):

    def closure():
        optimizer.zero_grad()
        out, _ = model(inputs)
        loss = loss_fn(head(out), targets)
        loss.backward()
        return loss

    optimizer.step(closure)
print("done")
