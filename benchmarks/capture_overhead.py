"""Capture overhead: steps/s of the same training loop with and without torchdoctor's hooks.

Run: .venv/bin/python benchmarks/capture_overhead.py

Both variants run in this one process in ABBA rounds (plain, captured, captured, plain), so
drifts in machine speed hit both alike; the figure is the median over rounds of the paired ratio. Two models: a small CNN (a typical step, few modules) and a
deep stack of tiny layers (many module calls per step, the worst case for per-module hooks).
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from torchdoctor.capture import CaptureSession
from torchdoctor.options import RunOptions

ROUNDS = 11
STEPS_PER_ROUND = 40
#: torchdoctor's own warmup (2 steps here) finds the outermost modules; it is not timed.
WARMUP_STEPS = 2


def small_cnn() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 16, 10),
    )
    return model, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))


def deep_tiny() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(40):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    return (
        nn.Sequential(*layers, nn.Linear(64, 10)),
        torch.randn(16, 64),
        torch.randint(0, 10, (16,)),
    )


def steps_per_s(model, x, y, loader) -> float:
    """Steps/s over STEPS_PER_ROUND steps, after WARMUP_STEPS untimed ones."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    it = iter(loader)
    t0 = 0.0
    for i in range(WARMUP_STEPS + STEPS_PER_ROUND):
        if i == WARMUP_STEPS:
            t0 = time.perf_counter()
        try:
            xb, yb = next(it)
        except StopIteration:
            it = iter(loader)
            xb, yb = next(it)
        loss = loss_fn(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return STEPS_PER_ROUND / (time.perf_counter() - t0)


def measure(name: str, make, rates: list[float] | None = None) -> float:
    model, x, y = make()
    data = torch.utils.data.TensorDataset(x.repeat(8, *[1] * (x.dim() - 1)), y.repeat(8))
    loader = torch.utils.data.DataLoader(data, batch_size=len(x))
    steps_per_s(model, x, y, loader)  # warm up the allocator and kernels

    def captured() -> float:
        # The sync finder's watched steps are not timed in a real run either (they have their
        # own benchmark, sync_watcher_overhead.py), so they are off here.
        session = CaptureSession(
            RunOptions(steps=10**9, warmup=WARMUP_STEPS, stop=False, sync_steps=0)
        )
        session.install()
        try:
            return steps_per_s(model, x, y, loader)
        finally:
            session.uninstall()

    # ABBA rounds: each ratio pairs runs taken side by side, so drifts in machine speed cancel.
    ratios, plain_rates, captured_rates = [], [], []
    for _ in range(ROUNDS):
        a1, b1 = steps_per_s(model, x, y, loader), captured()
        b2, a2 = captured(), steps_per_s(model, x, y, loader)
        ratios.append((b1 + b2) / (a1 + a2))
        plain_rates += [a1, a2]
        captured_rates += [b1, b2]
    ratios.sort()
    ratio = statistics.median(ratios)
    if rates is not None:
        rates.extend(plain_rates)
    print(
        f"{name:<28} plain {statistics.median(plain_rates):7.1f} steps/s   "
        f"captured {statistics.median(captured_rates):7.1f} steps/s   "
        f"ratio {ratio:.3f} ({(1 - ratio) * 100:+.1f}% slower; "
        f"rounds {ratios[0]:.3f}..{ratios[-1]:.3f})"
    )
    return ratio


def bare() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A step with almost no work: what remains is the hooks' absolute cost per step."""
    return nn.Linear(4, 2), torch.randn(1, 4), torch.randint(0, 2, (1,))


def main() -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{ROUNDS} ABBA rounds x {STEPS_PER_ROUND} steps"
    )
    measure("small CNN (8 modules)", small_cnn)
    measure("deep tiny MLP (81 modules)", deep_tiny)
    # On a shared machine the scatter of a 5-10 ms step is larger than the hooks' cost; the
    # bare loop gives that cost in microseconds per step.
    model, x, y = bare()
    plain_rate = []
    ratio = measure("bare step (1 Linear, batch 1)", bare, rates=plain_rate)
    plain_us = 1e6 / statistics.median(plain_rate)
    cost_us = plain_us * (1 / ratio - 1)
    print(
        f"hooks' cost per step: {cost_us:.0f} us; that is {cost_us / 50:.2f}% of a 5 ms step "
        f"and {cost_us / 100:.2f}% of a 10 ms step"
    )


if __name__ == "__main__":
    main()
