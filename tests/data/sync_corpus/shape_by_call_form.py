"""Ops whose output shape depends on the data in one call form only: the size-giving form of
each runs beside its data-dependent form and must not be reported."""

import torch
import torch.nn.functional as F


def step(model, optimizer, x, y, device):
    x, y = x.to(device), y.to(device)
    logits = model(x)
    target = F.one_hot(y, num_classes=10).float()
    target = target + F.one_hot(y, 10).float()
    seen = F.one_hot(y).float()  # expect: data-dependent-shape
    keep = y > 2
    rows = torch.where(keep)[0]  # expect: nonzero
    masked = torch.where(keep[:, None], logits, torch.zeros_like(logits))
    counts = (y % 3).long()
    spread = torch.repeat_interleave(y, counts)  # expect: data-dependent-shape
    twos = torch.full_like(y, 2)  # the size is known: two of each
    sized = torch.repeat_interleave(y, twos, output_size=2 * y.shape[0])
    doubled = y.repeat_interleave(2)
    flat = torch.repeat_interleave(counts)  # expect: data-dependent-shape
    loss = F.mse_loss(masked, target / 2) + 0.0 * (
        seen.sum() + rows.sum() + spread.sum() + doubled.sum() + flat.sum() + sized.sum()
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
