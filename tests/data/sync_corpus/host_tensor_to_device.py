import torch
import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    noise = torch.randn(x.shape)  # expect: host-tensor-to-device
    x = x + 0.01 * noise.to(device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
