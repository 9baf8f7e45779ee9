import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    if loss > 100:  # expect: tensor-branch
        loss = loss * 0.1
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
