"""A CPU training script whose cost sits in one CPU-bound transform, with a tiny model.

The transform (``Sharpen``, 2 ms of pure-Python work per sample by default, like a decoder)
keeps DataLoader workers busy on the same cores as the model, whose intra-op threads (one per
core by default) then wait for each other at every parallel region: more workers alone pay
little, more workers with ``torch.set_num_threads(1)`` pay much more. ``--wait-ms`` adds waiting
to the transform (a read from slow storage), which workers overlap whatever else runs on the
machine: the tests use it so that the fix's gain stands out of a loaded machine's noise.
``--thread-tax-ms`` injects what that contention costs instead of leaving it to the machine (on a
machine with idle cores the model's second thread helps, on a busy one it hurts): the model's
step waits that long for each intra-op thread beyond the first. Runs as a script
(``python cpu_transform.py --steps 40``) for the end-to-end tests of the sweep of workers with
threads and of ``torchdoctor run --fix``; the benchmark imports ``build_loader`` and ``step``.
"""

from __future__ import annotations

import argparse
import time

import torch
from slow_transform import Compose, ToFloat  # the same user's pipeline pieces
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Sharpen:
    """The costly step: ``cost_ms`` of CPU time per sample in pure Python, after ``wait_ms`` of
    waiting (a read from slow storage) when given."""

    def __init__(self, cost_ms: float, wait_ms: float = 0.0) -> None:
        self.cost_s = cost_ms / 1000
        self.wait_s = wait_ms / 1000

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.wait_s:
            time.sleep(self.wait_s)
        deadline = time.thread_time() + self.cost_s
        spins = 0
        while time.thread_time() < deadline:
            spins += 1
        return x


class Pictures(Dataset):
    def __init__(self, cost_ms: float, wait_ms: float = 0.0, n: int = 4096) -> None:
        self.n = n
        self.transform = Compose([ToFloat(), Sharpen(cost_ms, wait_ms)])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        image = torch.full((3, 16, 16), i % 256, dtype=torch.uint8)
        return self.transform(image), i % 10


def build_loader(
    cost_ms: float = 2.0, wait_ms: float = 0.0, batch_size: int = 16, **overrides
) -> DataLoader:
    kwargs = {"batch_size": batch_size, "shuffle": True, "num_workers": 0}
    kwargs.update(overrides)
    return DataLoader(Pictures(cost_ms, wait_ms), **kwargs)


class ThreadTax(nn.Module):
    """Waits ``tax_ms`` per intra-op thread beyond the first: the threads' contention, injected."""

    def __init__(self, tax_ms: float) -> None:
        super().__init__()
        self.tax_s = tax_ms / 1000

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.tax_s * (torch.get_num_threads() - 1))
        return x


def build_model(width: int = 256, layers: int = 0, thread_tax_ms: float = 0.0) -> nn.Module:
    """A small MLP: ``layers`` hidden ``width``-wide layers more than the one it always has, and
    a :class:`ThreadTax` first when ``thread_tax_ms`` is given."""
    hidden = [m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())]
    tax = [ThreadTax(thread_tax_ms)] if thread_tax_ms else []
    return nn.Sequential(
        *tax,
        nn.Flatten(),
        nn.Linear(3 * 16 * 16, width),
        nn.ReLU(),
        *hidden,
        nn.Linear(width, 10),
    )


def step(model: nn.Module, optimizer: torch.optim.Optimizer, batch) -> None:
    images, labels = batch
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(images), labels).backward()
    optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--transform-ms", type=float, default=2.0, help="CPU ms per sample")
    parser.add_argument("--wait-ms", type=float, default=0.0, help="ms per sample spent waiting")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--width", type=int, default=256, help="the MLP's hidden width")
    parser.add_argument("--layers", type=int, default=0, help="hidden layers more than one")
    parser.add_argument(
        "--thread-tax-ms", type=float, default=0.0, help="ms per step per intra-op thread past 1"
    )
    args = parser.parse_args()
    model = build_model(args.width, args.layers, args.thread_tax_ms)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = build_loader(args.transform_ms, args.wait_ms, num_workers=args.workers)
    done = 0
    start = time.perf_counter()
    while done < args.steps:
        for batch in loader:
            step(model, optimizer, batch)
            done += 1
            if done >= args.steps:
                break
    print(f"{done / (time.perf_counter() - start):.1f} steps/s")


if __name__ == "__main__":
    main()
