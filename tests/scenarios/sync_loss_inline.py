"""Seed 004's loss as the article first wrote it: the class weights built inline as a call's
argument, ``torch.Tensor([0.1] * NUM_CLASSES)``, moved to the logits' device every step, in a loss
module the script never moves (only the model goes to the device: an accelerator where there is
one, OpenReg's too). ``torchdoctor fix`` makes them a buffer built once; the losses must not
change."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 4
accelerator = getattr(torch, "accelerator", None)
device = accelerator.current_accelerator() if accelerator and accelerator.is_available() else "cpu"


def weighted_nll(pred, target, weight):
    nll = -pred.gather(1, target.unsqueeze(1)).squeeze(1)
    w = weight[target]
    return (nll * w).sum() / w.sum()


class CrossEntropyLoss(nn.Module):
    def forward(self, logits, target):
        pred = logits.log_softmax(dim=1)
        loss = weighted_nll(pred, target, torch.Tensor([0.1] * NUM_CLASSES).to(logits.device))
        return loss


data = TensorDataset(torch.randn(256, 16), torch.randint(0, NUM_CLASSES, (256,)))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, NUM_CLASSES)).to(device)
criterion = CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(100):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = criterion(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
