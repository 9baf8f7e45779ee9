"""Seed 004's loss after its fixes: weight built once as a buffer, no assert, arange on device."""

import torch
import torch.nn as nn


def log_softmax(x):
    return x - x.exp().sum(-1).log().unsqueeze(-1)


def weighted_nll(pred, target, weight):
    r = torch.arange(target.shape[0], device=pred.device)
    nll = -pred[r, target]
    nll = nll * weight[target]
    nll = nll / weight[target].sum()
    return nll.sum()


class CrossEntropyLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("weight", torch.Tensor([0.1] * 10))

    def forward(self, input, target):
        return weighted_nll(log_softmax(input), target, self.weight)


CRITERION = CrossEntropyLoss()


def step(model, optimizer, x, y, device):
    inputs = x.to(device=device, non_blocking=True)
    labels = y.to(device=device, non_blocking=True)
    loss = CRITERION.to(device)(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
