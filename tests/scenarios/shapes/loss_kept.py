"""The shape of a tutorial loop that reports its epoch's mean loss by summing the loss tensors
(``running_loss += loss``, no ``.item()``): every step's autograd graph stays alive through the
sum; it also reads the loss each step. Written here, for torchdoctor's tests."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
loader = DataLoader(TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,))), batch_size=16)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(100):
    running_loss = 0.0
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running_loss += loss
        if loss.item() > 1e6:  # a divergence check: a sync each step, a warning
            raise SystemExit("diverged")
    print(f"epoch {epoch}: loss {running_loss.item() / len(loader):.3f}")
