"""An input-bound training script whose cost sits in one transform (RandomBlur, 20 ms/sample).

Runs as a script (``python slow_transform.py --steps 40``) for the end-to-end tests of
``torchdoctor run --fix`` and ``torchdoctor loader``; ``build_loader`` and ``train`` are also
imported by tests/test_loader_scenario.py.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class ToFloat:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().div_(255)


class RandomBlur:
    """The costly step: 20 ms per sample (a sleep, like waiting on a slow library call)."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.020)
        return x


class Normalize:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x - 0.5) / 0.25


class Shapes(Dataset):
    def __init__(self, n: int = 2048) -> None:
        self.n = n
        self.transform = Compose([ToFloat(), RandomBlur(), Normalize()])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        image = torch.full((3, 16, 16), i % 256, dtype=torch.uint8)
        return self.transform(image), i % 10


def build_loader(**overrides) -> DataLoader:
    kwargs = {"batch_size": 16, "shuffle": True, "num_workers": 0}
    kwargs.update(overrides)
    return DataLoader(Shapes(), **kwargs)


def build_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, 10))


def train(loader: DataLoader, steps: int, model: nn.Module | None = None) -> list[float]:
    """Train for ``steps`` optimizer steps; the wall time of each step in ms."""
    model = model or build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    step_ms: list[float] = []
    last = time.perf_counter()
    while len(step_ms) < steps:
        for images, labels in loader:
            optimizer.zero_grad()
            loss_fn(model(images), labels).backward()
            optimizer.step()
            now = time.perf_counter()
            step_ms.append(1000.0 * (now - last))
            last = now
            if len(step_ms) >= steps:
                break
    return step_ms


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    step_ms = train(build_loader(), args.steps)
    print(f"median step {sorted(step_ms)[len(step_ms) // 2]:.1f} ms")


if __name__ == "__main__":
    main()
