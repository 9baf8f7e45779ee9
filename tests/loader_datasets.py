"""Datasets with known, injected per-sample costs, shared by the loader tests and benchmarks."""

from __future__ import annotations

import multiprocessing
import time

import torch
from torch.utils.data import Dataset


class Disk(Dataset):
    """Samples read from a simulated disk: ``serial_s`` under a lock shared by all workers (one
    device) plus ``parallel_s`` without it. Throughput grows with workers, then saturates at
    ``1 / (batch_size * serial_s)`` batches per second."""

    def __init__(self, n: int, serial_s: float, parallel_s: float) -> None:
        self.n, self.serial_s, self.parallel_s = n, serial_s, parallel_s
        self.device = multiprocessing.get_context("fork").Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.serial_s:
            with self.device:
                time.sleep(self.serial_s)
        time.sleep(self.parallel_s)
        return torch.full((3, 32, 32), float(i))


class Busy(Dataset):
    """Per sample: ``cpu_s`` of pure-Python CPU work (like a decoder), bounded by the cores."""

    def __init__(self, n: int, cpu_s: float) -> None:
        self.n, self.cpu_s = n, cpu_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        deadline = time.thread_time() + self.cpu_s
        x = 0
        while time.thread_time() < deadline:
            x += 1
        return torch.full((3, 32, 32), float(i))
