"""The custom loss of seed 004 with its three problems (`.cuda()` written as `.to(device)`)."""

import torch
import torch.nn as nn


def log_softmax(x):
    return x - x.exp().sum(-1).log().unsqueeze(-1)


def weighted_nll(pred, target, weight):
    assert target.max() < 10  # expect: tensor-assert
    nll = -pred[range(target.shape[0]), target]  # expect: python-index
    nll = nll * weight[target]
    nll = nll / weight[target].sum()
    sum_nll = nll.sum()
    return sum_nll


class CrossEntropyLoss(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.device = device

    def forward(self, input, target):
        pred = log_softmax(input)
        weight = torch.Tensor([0.1] * 10).to(self.device)  # expect: constant-rebuilt
        loss = weighted_nll(pred, target, weight)
        return loss


def step(model, optimizer, x, y, device):
    inputs = x.to(device=device, non_blocking=True)
    labels = y.to(device=device, non_blocking=True)
    outputs = model(inputs)
    loss = CrossEntropyLoss(device)(outputs, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
