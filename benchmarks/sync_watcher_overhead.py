"""What SyncWatcher costs: a small training step with and without it, measured side by side.

Run: .venv/bin/python benchmarks/sync_watcher_overhead.py [--steps 200] [--rounds 5]

The watcher adds a Python call per torch call made from Python (not per kernel), so the ratio
depends on how many torch calls a step makes and how long each one takes. Two steps are shown:
a small MLP with the built-in loss (few, larger ops) and the same MLP with the fixed seed-004
custom loss (many tiny ops, the worst case). Rounds alternate with and without the watcher so
load from other processes hits both alike; medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torchdoctor.capture.syncs import SyncWatcher


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
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {args.steps} steps x {args.rounds} rounds")
    print(f"{'step':<28}{'plain ms':>10}{'watched ms':>12}{'ratio':>8}")
    for name in ("builtin", "custom"):
        step = make_step(name)
        for _ in range(20):
            step()  # warm-up
        plain, watched = [], []
        for _ in range(args.rounds):
            plain.append(time_steps(step, args.steps, watched=False))
            watched.append(time_steps(step, args.steps, watched=True))
        p, w = statistics.median(plain), statistics.median(watched)
        label = "MLP + F.cross_entropy" if name == "builtin" else "MLP + custom loss (seed 004)"
        print(f"{label:<28}{p:>10.3f}{w:>12.3f}{w / p:>8.2f}")


if __name__ == "__main__":
    main()
