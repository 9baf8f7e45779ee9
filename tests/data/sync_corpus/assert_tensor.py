import torch.nn.functional as F


def checked_loss(logits, target):
    assert target.max() < 10  # expect: tensor-assert
    return F.cross_entropy(logits, target)


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    loss = checked_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
