import torch
import torch.nn.functional as F

calls = [0]


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    calls[0] += 1
    decay = torch.tensor([0.99 ** calls[0]] * 10).to(device)  # expect: tensor-from-python-data
    loss = F.cross_entropy(model(x) * decay, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
