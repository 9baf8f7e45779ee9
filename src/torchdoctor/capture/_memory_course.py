"""The memory in use over the measured steps, read three times (docs/memory.md): at their start,
after half of them and at their end, so that a step that keeps what it made is told with its rate
(``analysis.memory_course``). Three reads per run, none per step: nothing the steps time.

On a device with allocator statistics the reading is what its allocator holds for tensors
(exact, no sync needed: the allocator's own count); on the CPU the process's resident memory.
"""

from __future__ import annotations

from typing import Any

import torch

from .._devices import available
from ..record import MemoryCourse


class MemoryCourseReader:
    """Reads at :meth:`read` (``steps`` measured so far); :meth:`course` at the end."""

    def __init__(self, device: torch.device | None) -> None:
        self._device = device if device is not None and device.type != "cpu" else None
        self._course = MemoryCourse("device" if self._device is not None else "host")

    def read(self, steps: int) -> None:
        try:
            used, free = (
                _device_reading(self._device) if self._device is not None else _host_reading()
            )
        except Exception:  # noqa: BLE001 - what cannot be read is not told, never the script's
            return
        if used is None:
            return
        if self._course.steps and self._course.steps[-1] == steps:
            return  # the same point read twice (a run of one step)
        self._course.steps.append(steps)
        self._course.used.append(int(used))
        self._course.free = int(free) if free is not None else None

    def course(self) -> MemoryCourse | None:
        """The readings, when at least the first and the last were taken."""
        return self._course if len(self._course.used) >= 2 else None


def _host_reading() -> tuple[int, int | None]:
    import psutil

    return psutil.Process().memory_info().rss, available()


def _device_reading(device: torch.device) -> tuple[int | None, int | None]:
    """The allocator's bytes allocated, and what is free: the device's free memory plus what the
    allocator holds unused (it allocates from that first)."""
    owners: list[Any] = [getattr(torch, "accelerator", None), getattr(torch, device.type, None)]
    allocated = reserved = free = None
    for owner in owners:
        if owner is None:
            continue
        if allocated is None:
            allocated = _call(owner, "memory_allocated", device)
        if reserved is None:
            reserved = _call(owner, "memory_reserved", device)
        if free is None:
            info = _call(owner, "get_memory_info", device) or _call(owner, "mem_get_info", device)
            free = info[0] if info else None
    if free is not None and allocated is not None and reserved is not None:
        free += max(reserved - allocated, 0)
    return allocated, free


def _call(owner: Any, name: str, device: torch.device) -> Any:
    fn = getattr(owner, name, None)
    if fn is None:
        return None
    try:
        return fn(device)
    except (RuntimeError, NotImplementedError, TypeError, AttributeError, ValueError):
        return None
