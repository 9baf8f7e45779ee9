import torch
import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    weight = torch.Tensor([0.1] * 10).to(device)  # expect: constant-rebuilt
    loss = F.cross_entropy(model(x), y, weight=weight)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
