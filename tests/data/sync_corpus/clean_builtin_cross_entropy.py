import torch
import torch.nn as nn


class Criterion(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("weight", torch.tensor([0.1] * 10))  # built once, outside the step
        self.loss = nn.CrossEntropyLoss(weight=self.weight)

    def forward(self, logits, target):
        return self.loss(logits, target)


CRITERION = Criterion()


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    loss = CRITERION.to(device)(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
