import torch
import torch.nn.functional as F

schedule = []


def step(model, optimizer, x, y, device):
    # Host-side bookkeeping on tensors that never meet the device is not a sync or a copy.
    counts = torch.tensor([3, 1, 4, 1, 5])
    schedule.append(counts.sum().item())
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
