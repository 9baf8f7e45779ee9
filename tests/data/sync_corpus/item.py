import torch.nn.functional as F

running = []


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running.append(loss.item())  # expect: item
