import torch
import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    present = torch.unique(y)  # expect: unique
    logits = model(x)
    loss = F.cross_entropy(logits, y) + 0.0 * logits[:, present].sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
