"""What the training held when it ran out of memory, by category, on the memory that ran out."""

from __future__ import annotations

import torch
from torch import nn

from torchdoctor.capture import held_by_category


def test_parameters_gradients_and_the_optimizers_state_are_each_counted_once():
    model = nn.Linear(1000, 1000)  # 1,001,000 float32 parameters: 4,004,000 bytes
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 1000)).sum().backward()
    opt.step()
    params = 4_004_000
    # Adam keeps two moments per parameter, and a 0-dim step count per tensor (on the CPU)
    held = held_by_category([model, model], [opt, opt], "host")  # each counted once
    assert held == {"parameters": params, "gradients": params, "optimizer state": 2 * params + 8}
    # none of it is on a device
    assert held_by_category([model], [opt], "device") == dict.fromkeys(held, 0)
    # a parameter the optimizer trains but no module called is still the training's
    extra = nn.Parameter(torch.zeros(10))
    opt.add_param_group({"params": [extra]})
    assert held_by_category([model], [opt], "host")["parameters"] == params + 40
