import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    logits = model(x)
    keep = (y != 0).nonzero().squeeze(1)  # expect: nonzero
    loss = F.cross_entropy(logits.index_select(0, keep), y.index_select(0, keep))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
