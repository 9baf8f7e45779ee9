"""A loop that catches BaseException and keeps going: the stop must still win."""

import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
caught = 0
for step in range(100_000):
    try:
        loss = model(torch.randn(8, 4)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    except BaseException:  # noqa: BLE001 - deliberately hostile
        caught += 1
        if caught > 50:
            raise SystemExit("gave up")
