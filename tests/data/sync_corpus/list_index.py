import torch.nn.functional as F

FOCUS = [1, 3, 5]


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    logits = model(x)
    focus = logits[:, FOCUS]  # expect: python-index
    loss = F.cross_entropy(logits, y) + 0.01 * focus.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
