import torch.nn.functional as F

log = []


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    log.append(f"loss={loss:.4f}")  # expect: print-tensor
