import torch
import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    per_sample = F.cross_entropy(model(x), y, reduction="none")
    loss = torch.masked_select(per_sample, y > 0).mean()  # expect: masked-select
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
