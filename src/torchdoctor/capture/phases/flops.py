"""The step's arithmetic: FLOPs of one untimed step, and the device's peak to compare them with.

The step runs under ``torch.utils.flop_counter.FlopCounterMode`` (forward and backward, as the
script calls them); the count and the outermost modules' parameter count go to
``session.data.flops``. The peak comes from a table of known accelerators
(:mod:`torchdoctor.analysis.trials`); on any other device it is **measured**: the best of a few
square matmuls in the model's dtype on the same device, done between two steps.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from .base import Phase

#: Side of the square matmul that measures a device's peak (CPU; accelerators use 4x).
PEAK_MATMUL_N = 1024
PEAK_REPEATS = 5


class FlopsPhase(Phase):
    name = "flops"

    def __init__(self) -> None:
        super().__init__()
        self._mode: Any = None

    def wanted(self, session) -> bool:
        return bool(session.options.trials or session.options.flops) and bool(session.data.measured)

    def total(self, session) -> int:
        return 1

    def start(self, session) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def on_step(self, session, step) -> bool:
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)
            params = sum(p.numel() for m in session.root_modules() for p in m.parameters())
            dtype = _model_dtype(session)
            session.data.flops = {
                "per_step": float(mode.get_total_flops()),
                "params": params,
                "dtype": str(dtype).replace("torch.", ""),
                "measured_peak": measured_peak(session.clock.device, dtype),
            }
        return super().on_step(session, step)

    def close(self, session) -> None:
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)


def measured_peak(device: Any, dtype: torch.dtype) -> dict[str, Any]:
    """FLOP/s of the best of a few square matmuls on ``device`` in ``dtype``, and how."""
    device = device if device is not None else torch.device("cpu")
    n = PEAK_MATMUL_N if device.type == "cpu" else 4 * PEAK_MATMUL_N
    if dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        dtype = torch.float32
    # Constant operands: the script's random generators are not touched.
    a = torch.full((n, n), 0.5, device=device, dtype=dtype)
    b = torch.full((n, n), 0.25, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(PEAK_REPEATS):
        _synchronize(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        _synchronize(device)
        best = min(best, time.perf_counter() - t0)
    flops = 2.0 * n**3 / best if best > 0 else 0.0
    return {
        "flops_per_s": flops,
        "source": f"measured: best of {PEAK_REPEATS} {n}x{n} matmuls, {str(dtype)[6:]}, "
        f"{device.type}, {torch.get_num_threads()} threads",
    }


def _model_dtype(session) -> torch.dtype:
    for module in session.root_modules():
        for p in module.parameters():
            if p.is_floating_point():
                return p.dtype
    return torch.float32


def _synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)
