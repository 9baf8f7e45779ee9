import torch.nn.functional as F

history = []


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    history.append(loss.detach().cpu())  # expect: to-host
