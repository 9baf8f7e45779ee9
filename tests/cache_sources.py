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
    """Numbered samples that take ``delay_s`` each and log every index they serve to a file.

    With ``gate`` (a path) and ``gate_from``, a sample from that index on waits until the path
    exists (the first, middle and last, which the cache's fingerprint reads, do not): a build
    cannot finish before the test says so, however fast or slow the machine."""

    def __init__(
        self,
        count: int,
        delay_s: float,
        log_path: str | None,
        gate: str | None = None,
        gate_from: int = 0,
    ) -> None:
        self.count = count
        self.delay_s = delay_s
        self.log_path = log_path
        self.gate = gate
        self.gate_from = gate_from

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        if self.log_path:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(fd, f"{index}\n".encode())
            os.close(fd)
        time.sleep(self.delay_s)
        fingerprinted = index in (0, self.count // 2, self.count - 1)
        if self.gate and index >= self.gate_from and not fingerprinted:
            while not os.path.exists(self.gate):
                time.sleep(0.01)
        image = np.full((8, 8, 3), index % 256, dtype=np.uint8)
        return image, index


def slow() -> SlowDataset:
    """Configured through the environment, so a child process builds the same dataset."""
    return SlowDataset(
        int(os.environ.get("TD_SLOW_COUNT", "40")),
        float(os.environ.get("TD_SLOW_DELAY_S", "0")),
        os.environ.get("TD_SLOW_LOG"),
        os.environ.get("TD_SLOW_GATE"),
        int(os.environ.get("TD_SLOW_GATE_FROM", "0")),
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
