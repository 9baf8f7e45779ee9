import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    scale = 1.0 / max(1.0, float(loss))  # expect: scalar-conversion
    optimizer.zero_grad()
    (loss * scale).backward()
    optimizer.step()
