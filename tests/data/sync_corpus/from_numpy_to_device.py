import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(0)


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    keep = torch.from_numpy(rng.random(x.shape[0]) > 0.2)  # expect: tensor-from-python-data
    per_sample = F.cross_entropy(model(x), y, reduction="none")
    loss = (per_sample * keep.to(device)).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
