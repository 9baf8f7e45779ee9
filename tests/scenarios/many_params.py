"""Adam over 300 small parameter tensors: the per-tensor optimizer step dominates, so the fused
(multi-tensor) step is much faster. ``torchdoctor fix --try foreach`` writes ``fused=True``."""

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)  # tiny matmuls: a second thread only adds noise beside torchdoctor's
model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(150)])
opt = torch.optim.Adam(
    model.parameters(),
    lr=1e-3,
)
x = torch.randn(4, 32)
for step in range(100000):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
