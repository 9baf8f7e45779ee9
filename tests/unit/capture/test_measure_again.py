"""The script's steps again after the model-alone ones (``capture.phases.measure_again``): taken
after the batches the loader's workers prefetched meanwhile, and kept as ``measured_after``."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.capture._session import CaptureSession, StopRun
from torchdoctor.capture.phases.measure_again import MIN_STEPS, MeasureAgainPhase, prefetched
from torchdoctor.options import RunOptions


def _train(loader: DataLoader, steps: int) -> None:
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps // len(loader) + 1):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()


@pytest.mark.parametrize("workers", [0, 2])
def test_the_steps_after_the_model_alone_ones_are_kept_after_the_prefetched_ones(workers):
    data = TensorDataset(torch.randn(4096, 4), torch.randn(4096, 1))
    loader = DataLoader(
        data, batch_size=4, num_workers=workers, prefetch_factor=3 if workers else None
    )
    assert prefetched(loader) == workers * 3
    session = CaptureSession(
        RunOptions(steps=8, warmup=2, sync_steps=0, loader_doctor="never", stop=True)
    )
    session.install()
    try:
        _train(loader, 200)
    except StopRun:
        pass
    finally:
        session.uninstall()
    data = session.data
    assert len(data.model_alone) == 8
    assert len(data.measured_after) == MIN_STEPS  # 8 x 0.25 = 2, at least 3
    # the steps whose batches the workers made during the model-alone ones were taken first
    (phase,) = [p for p in session.table if isinstance(p, MeasureAgainPhase)]
    assert phase.steps_done == workers * 3 + MIN_STEPS
    assert not session.passes.without_workers


def test_no_model_alone_steps_no_second_bracket():
    loader = DataLoader(TensorDataset(torch.randn(256, 4), torch.randn(256, 1)), batch_size=4)
    session = CaptureSession(
        RunOptions(steps=4, warmup=2, sync_steps=0, counterfactuals=False, stop=True)
    )
    session.install()
    try:
        _train(loader, 100)
    except StopRun:
        pass
    finally:
        session.uninstall()
    assert session.data.model_alone == [] and session.data.measured_after == []


class _Slow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def forward(self, x):
        time.sleep(0.03)
        return self.layer(x)


def test_a_window_too_short_for_the_cpu_counters_is_widened_to_the_bracket():
    # 8 measured steps of 30 ms: 0.24 s, under the counters' half second. With the model-alone
    # steps and the bracket after them, the window is about 0.6 s: the machine's load is told.
    loader = DataLoader(TensorDataset(torch.randn(4096, 4), torch.randn(4096, 1)), batch_size=4)
    session = CaptureSession(
        RunOptions(steps=8, warmup=2, sync_steps=0, loader_doctor="never", stop=True)
    )
    session.install()
    try:
        model = _Slow()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    except StopRun:
        pass
    finally:
        session.uninstall()
    system = session.data.system
    assert system is not None and system.cpu_percent_per_core == []  # the measured window's
    assert system.others_cpu_cores is not None and system.others_cpu_cores >= 0.0
