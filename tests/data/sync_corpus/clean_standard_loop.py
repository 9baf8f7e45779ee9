import torch.nn.functional as F

running = []


def step(model, optimizer, x, y, device):
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    running.append(loss.detach())  # accumulated on the device, read later
