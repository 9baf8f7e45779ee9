"""EMA.update against the per-tensor state_dict loop of seed article 003, side by side in one run.

    python benchmarks/ema_update.py            # CPU, a ResNet-like stack of 150 tensors, 4.4M params

The model is 25 conv + BatchNorm blocks in three widths (64, 128, 256 channels): 150 tensors
(conv weights, BatchNorm weights, biases, running statistics and int64 counters), 4.4M
parameters, which is the shape that makes a per-tensor loop pay: many tensors, most of them
small. Both sides average the same model:

  (a) loop:  the seed's ModelEMA, re-implemented: for each entry of ``state_dict()`` that is
             floating point, ``v *= d`` then ``v += (1 - d) * live[k]`` (three passes over the
             tensor and a temporary per tensor); integer buffers are left as they were
  (b) EMA:   ``torchdoctor.EMA.update``: one ``torch._foreach_lerp_`` per (device, dtype) group
             (one pass), integer buffers copied

Each sample times --updates calls in a row; samples alternate a b b a for --rounds rounds, so
drift in the machine's speed falls on both sides alike. Prints the median ms per update of
each side and the ratio. Both averages are checked to agree before timing.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from torchdoctor import EMA


def resnet_like_stack() -> nn.Sequential:
    """25 conv (no bias) + BatchNorm + ReLU blocks: 6 tensors each, 150 in all."""
    layers: list[nn.Module] = []
    in_channels = 3
    for width, blocks in ((64, 10), (128, 10), (256, 5)):
        for _ in range(blocks):
            layers += [
                nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            in_channels = width
    return nn.Sequential(*layers)


class StateDictLoopEMA:
    """The seed's ModelEMA as it averages: a Python loop over ``state_dict()``, tensor by tensor."""

    def __init__(self, model: nn.Module, decay: float = 0.9999, warmup_steps: float = 2000) -> None:
        self.module = copy.deepcopy(model).eval()
        self.module.requires_grad_(False)
        self.decay = decay
        self.warmup_steps = warmup_steps
        self.updates = 0

    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.warmup_steps))
        with torch.no_grad():
            live = model.state_dict()
            for name, averaged in self.module.state_dict().items():
                if averaged.dtype.is_floating_point:
                    averaged *= d
                    averaged += (1.0 - d) * live[name].detach()


def check_agreement(model: nn.Module) -> None:
    """Both sides give the same average after a few updates of a changing model."""
    live = copy.deepcopy(model)
    loop, ema = StateDictLoopEMA(live, warmup_steps=3), EMA(live, warmup_steps=3)
    for _ in range(4):
        with torch.no_grad():
            for p in live.parameters():
                p.add_(torch.randn_like(p))
        loop.update(live)
        ema.update(live)
    averaged = ema.module.state_dict()
    for name, value in loop.module.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(averaged[name], value, rtol=1e-5, atol=1e-6)


def ms_per_update(update: Callable[[nn.Module], None], model: nn.Module, updates: int) -> float:
    start = time.perf_counter()
    for _ in range(updates):
        update(model)
    return (time.perf_counter() - start) * 1e3 / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="a b b a rounds (default 6)")
    parser.add_argument("--updates", type=int, default=20, help="updates per sample (default 20)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = resnet_like_stack()
    tensors = len(model.state_dict())
    params = sum(p.numel() for p in model.parameters())
    check_agreement(model)

    sides = {"loop": StateDictLoopEMA(model).update, "EMA": EMA(model).update}
    for update in sides.values():  # warm-up: first-call allocations and dispatch caches
        ms_per_update(update, model, args.updates)
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name in ("loop", "EMA", "EMA", "loop"):
            samples[name].append(ms_per_update(sides[name], model, args.updates))

    print(
        f"model: {tensors} tensors, {params / 1e6:.1f}M parameters; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU"
    )
    print(f"{args.rounds} ABBA rounds x {args.updates} updates per sample")
    median = {name: statistics.median(values) for name, values in samples.items()}
    for name, label in (("loop", "state_dict loop (seed 003)"), ("EMA", "torchdoctor.EMA.update")):
        print(f"  {label:28s} {median[name]:7.2f} ms per update (median)")
    print(f"  loop / EMA: {median['loop'] / median['EMA']:.2f}x")


if __name__ == "__main__":
    main()
