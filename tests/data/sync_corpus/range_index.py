import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    logp = F.log_softmax(model(x), dim=1)
    loss = -logp[range(y.shape[0]), y].mean()  # expect: python-index
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
