"""Seed 004's loss on in-memory data: a weight tensor built from a Python list every step, an
``assert`` on a tensor value, and indexing with a Python ``range`` (three host round-trips on an
accelerator). ``torchdoctor fix`` rewrites all three; the losses must not change."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 4
CLASS_WEIGHTS = [1.0, 1.5, 0.5, 1.0]


class WeightedLoss(nn.Module):
    """The custom loss, as the article found it."""

    def forward(self, logits, target):
        weight = torch.tensor(CLASS_WEIGHTS, device=logits.device)  # every step
        assert target.max() < NUM_CLASSES, "labels out of range"
        log_probs = logits.log_softmax(dim=1)
        picked = log_probs[range(len(target)), target]
        w = weight[target]
        return -(w * picked).sum() / w.sum()


data = TensorDataset(torch.randn(256, 16), torch.randint(0, NUM_CLASSES, (256,)))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, NUM_CLASSES))
loss_fn = WeightedLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(100):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
