"""Iterates a DataLoader and runs the model, but never steps an optimizer (inference)."""

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(4, 2)
loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8)
with torch.no_grad():
    for (x,) in loader:
        model(x)
print("inference done")
