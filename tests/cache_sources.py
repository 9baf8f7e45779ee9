"""Datasets that tests build caches from, importable as ``cache_sources:NAME`` (also in children)."""

from __future__ import annotations

import os
import time

import numpy as np
import torch


class MixedDataset:
    """Dict samples of every kind the cache stores: fixed and variable arrays, scalars, bytes."""

    def __init__(self, count: int = 50) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        rng = np.random.default_rng(index)
        return {
            "tokens": rng.integers(0, 60000, size=3 + index % 7, dtype=np.uint16),
            "features": rng.standard_normal(4).astype(np.float32),
            "mask": torch.arange(6).reshape(2, 3) % (index % 3 + 1) == 0,
            "label": index % 5,
            "weight": index / 7,
            "raw": bytes([index % 256]) * (index % 4),
        }


def mixed() -> MixedDataset:
    return MixedDataset()


class SlowDataset:
    """Numbered samples that take ``delay_s`` each and log every index they serve to a file."""

    def __init__(self, count: int, delay_s: float, log_path: str | None) -> None:
        self.count = count
        self.delay_s = delay_s
        self.log_path = log_path

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        if self.log_path:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(fd, f"{index}\n".encode())
            os.close(fd)
        time.sleep(self.delay_s)
        image = np.full((8, 8, 3), index % 256, dtype=np.uint8)
        return image, index


def slow() -> SlowDataset:
    """Configured through the environment, so a child process builds the same dataset."""
    return SlowDataset(
        int(os.environ.get("TD_SLOW_COUNT", "40")),
        float(os.environ.get("TD_SLOW_DELAY_S", "0")),
        os.environ.get("TD_SLOW_LOG"),
    )


class BadDataset:
    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int):
        return {"text": "hello"}


def bad() -> BadDataset:
    return BadDataset()


class VaryingDtype:
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int):
        return {"x": np.zeros(2, dtype=np.float32 if index < 2 else np.float64)}


def varying_dtype() -> VaryingDtype:
    return VaryingDtype()
