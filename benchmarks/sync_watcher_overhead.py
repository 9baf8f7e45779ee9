"""What SyncWatcher costs: a small training step with and without it, measured side by side.

Run: .venv/bin/python benchmarks/sync_watcher_overhead.py [--steps 20] [--rounds 40]

The watcher adds a Python call per torch call made from Python (not per kernel), so the ratio
depends on how many torch calls a step makes and how long each one takes. Two steps are shown:
a small MLP with the built-in loss (few, larger ops) and the same MLP with the fixed seed-004
custom loss (many tiny ops, the worst case). Short rounds alternate with and without the
watcher so load from other processes hits both alike; the ratio is the median of the per-round
ratios (each pair measured back to back), the times are medians over rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from torchdoctor.capture.syncs import SyncWatcher


class PassThroughMode(TorchFunctionMode):
    """The floor: an empty torch function mode."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def per_call_us(context, calls: int = 20_000) -> float:
    """Microseconds per ``x.add_(1)`` on a 4-element tensor inside ``context``."""
    x = torch.ones(4)
    with context:
        start = time.perf_counter()
        for _ in range(calls):
            x.add_(1)
        return (time.perf_counter() - start) / calls * 1e6


def custom_loss(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    pred = logits - logits.exp().sum(-1).log().unsqueeze(-1)
    rows = torch.arange(target.shape[0], device=logits.device)
    nll = -pred[rows, target] * weight[target]
    return (nll / weight[target].sum()).sum()


def make_step(loss_name: str):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    weight = torch.full((10,), 0.1)
    x = torch.randn(64, 256)
    y = torch.randint(0, 10, (64,))

    def step() -> None:
        logits = model(x)
        if loss_name == "builtin":
            loss = F.cross_entropy(logits, y)
        else:
            loss = custom_loss(logits, y, weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def time_steps(step, steps: int, watched: bool) -> float:
    """Mean milliseconds per step over ``steps`` steps."""
    watcher = SyncWatcher(on_accelerator=False)
    if watched:
        watcher.start()
    try:
        start = time.perf_counter()
        for _ in range(steps):
            step()
            if watched:
                watcher.mark_step()
        elapsed = time.perf_counter() - start
    finally:
        watcher.stop()
    assert not watcher.events, watcher.events  # the benchmark steps are clean
    return elapsed / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {args.steps} steps x {args.rounds} rounds")
    print(f"{'step':<28}{'plain ms':>10}{'watched ms':>12}{'ratio':>8}")
    for name in ("builtin", "custom"):
        step = make_step(name)
        for _ in range(20):
            step()  # warm-up
        plain, watched, ratios = [], [], []
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            ms = {flag: time_steps(step, args.steps, watched=flag) for flag in order}
            plain.append(ms[False])
            watched.append(ms[True])
            ratios.append(ms[True] / ms[False])
        p, w = statistics.median(plain), statistics.median(watched)
        label = "MLP + F.cross_entropy" if name == "builtin" else "MLP + custom loss (seed 004)"
        print(f"{label:<28}{p:>10.3f}{w:>12.3f}{statistics.median(ratios):>8.2f}")

    rows: dict[str, list[float]] = {"no mode": [], "empty mode": [], "SyncWatcher": []}
    for _ in range(5):
        rows["no mode"].append(per_call_us(contextlib.nullcontext()))
        rows["empty mode"].append(per_call_us(PassThroughMode()))
        rows["SyncWatcher"].append(per_call_us(SyncWatcher(on_accelerator=False)))
    print(
        "one torch call (x.add_(1), 4 elements), median us: "
        + ", ".join(f"{name} {statistics.median(values):.2f}" for name, values in rows.items())
    )


if __name__ == "__main__":
    main()
