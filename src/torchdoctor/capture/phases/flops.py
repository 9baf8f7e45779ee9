"""The step's arithmetic: FLOPs of one untimed step, and the device's peak to compare them with.

The step runs under ``torch.utils.flop_counter.FlopCounterMode`` (forward and backward, as the
script calls them); the count and the outermost modules' parameter count go to
``session.data.flops``. Ops with arithmetic that the counter has no formula for (recurrent
layers: ``mkldnn_rnn_layer``, ``_cudnn_rnn``; ops of extensions) are listed with their share of
the step's op time (on the CPU; by name only on an accelerator, where the host does not see
their time): a recurrent kernel is the layer's whole arithmetic, so it makes the count partial
whatever its time; other ops do when they matter. The dtype is the one the model computes
in: autocast's when the script's forward runs under it. The peak comes from a table of known accelerators
(:mod:`torchdoctor.analysis.trials`); on any other device it is **measured**: the best of a few
square matmuls in the model's dtype on the same device, done between two steps.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ...record import phase_names
from .._patch import call_op
from .base import Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks

#: Side of the square matmul that measures a device's peak (CPU; accelerators use 4x).
PEAK_MATMUL_N = 1024
PEAK_REPEATS = 5


class FlopsPhase(Phase):
    name = phase_names.FLOPS
    writes = ("flops",)
    reads = ("measured",)

    def __init__(self) -> None:
        super().__init__()
        self._mode: Any = None

    def wanted(self, session: PhaseSession) -> bool:
        return bool(session.options.trials or session.options.flops) and bool(session.data.measured)

    def total(self, session: PhaseSession) -> int:
        return 1

    def start(self, session: PhaseSession) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()
        device = session.clock.device
        self._uncounted = _Uncounted(
            set(self._mode.flop_registry), timed=device is None or device.type == "cpu"
        )
        self._uncounted.__enter__()

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        mode, self._mode = self._mode, None
        if mode is not None:
            uncounted = self._close_uncounted()
            mode.__exit__(None, None, None)
            params = sum(p.numel() for m in session.root_modules() for p in m.parameters())
            dtype = _model_dtype(session)
            session.data.flops = {
                "per_step": float(mode.get_total_flops()),
                "params": params,
                "dtype": str(dtype).replace("torch.", ""),
                "measured_peak": measured_peak(session.clock.device, dtype),
                "uncounted": uncounted.listed() if uncounted is not None else [],
            }
        return super().on_step(session, step)

    def close(self, session: PhaseSession) -> None:
        mode, self._mode = self._mode, None
        if mode is not None:
            self._close_uncounted()
            mode.__exit__(None, None, None)

    def _close_uncounted(self) -> _Uncounted | None:
        uncounted, self._uncounted = getattr(self, "_uncounted", None), None
        if uncounted is not None:
            uncounted.__exit__(None, None, None)
        return uncounted


#: Op names with arithmetic the FLOP counter has no formula for: recurrent layers' kernels.
_HEAVY_WORDS = ("rnn", "lstm", "gru")
#: Namespaces of ops that do no arithmetic of the model's: profiler ranges (the optimizer's
#: record_function), collectives.
_BOOKKEEPING = ("profiler", "c10d", "_c10d_functional", "_c10d_functional_autograd")


class _Uncounted(TorchDispatchMode):
    """Times every op of the step and keeps those with uncounted arithmetic."""

    def __init__(self, counted: set[Any], timed: bool) -> None:
        super().__init__()
        self._counted = counted
        self.time_part = timed
        self.total_s = 0.0
        self.ops: dict[str, float] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start = time.perf_counter() if self.time_part else 0.0
        out = call_op(func, args, kwargs or {})  # what it raises is the script's
        spent = time.perf_counter() - start if self.time_part else 0.0
        self.total_s += spent
        packet = func.overloadpacket
        if packet not in self._counted and _heavy(packet):
            name = str(packet)
            self.ops[name] = self.ops.get(name, 0.0) + spent
        return out

    def listed(self) -> list[dict[str, Any]]:
        """``[{op, share, recurrent}]``, costliest first (share ``None`` where untimed)."""
        out = [
            {
                "op": op,
                "share": round(s / self.total_s, 4) if self.time_part and self.total_s else None,
                "recurrent": any(w in op.lower() for w in _HEAVY_WORDS),
            }
            for op, s in self.ops.items()
        ]
        return sorted(out, key=lambda d: -(d["share"] or 0.0))


def _heavy(packet: Any) -> bool:
    namespace = getattr(packet, "_qualified_op_name", str(packet)).split("::")[0].split(".")[0]
    name = str(packet).lower()
    if namespace in _BOOKKEEPING:
        return False
    return namespace not in ("aten", "prims", "prim") or any(w in name for w in _HEAVY_WORDS)


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


def _model_dtype(session: PhaseSession) -> torch.dtype:
    """autocast's dtype where the script's forward runs under it, else the parameters'."""
    autocast = session.state.autocast_dtype
    if autocast is not None and hasattr(torch, autocast):
        return getattr(torch, autocast)
    for module in session.root_modules():
        for p in module.parameters():
            if p.is_floating_point():
                return p.dtype
    return torch.float32


def _synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)
