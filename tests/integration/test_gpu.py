"""GPU paths: run only where an accelerator exists (skipped on CPU-only machines)."""

from __future__ import annotations

import pytest
import torch

from torchdoctor import watch

has_accelerator = hasattr(torch, "accelerator") and torch.accelerator.is_available()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_accelerator, reason="needs a GPU/accelerator"),
]


def test_device_event_clock_on_accelerator():
    device = torch.accelerator.current_accelerator()
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(512, 1024))
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    with watch(steps=5, warmup=2) as run:
        for _ in range(100):
            for (x,) in loader:
                x = x.to(device, non_blocking=True)
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
    rec = run.record
    assert rec.env.clock.startswith("device events")
    assert rec.parts_ms["forward"].median > 0 and rec.parts_ms["backward"].median > 0
    assert rec.env.device.startswith(device.type)
