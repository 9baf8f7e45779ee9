import torch.nn.functional as F

log = []


def step(model, optimizer, x, y, device):
    inputs, labels = x.to(device), y.to(device)
    loss = F.nll_loss(F.log_softmax(model(inputs), dim=1), labels)
    log.append(f"loss={loss:.4f}")  # expect: print-tensor
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
