"""Where a run happens, detected once into a value: versions, device, clock, cores, rank.

Ranks come from torchrun's environment, as the session's :class:`~torchdoctor.record.RankEnv`
read it; tests build an :class:`~torchdoctor.record.Environment` directly to exercise other
cases.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import torch

from .. import _devices
from ..record import Environment, RankEnv

if TYPE_CHECKING:
    from ._session import CaptureSession


def detect_environment(session: CaptureSession | None = None) -> Environment:
    """Versions, device, clock and cores of this process."""
    clock = session.clock if session is not None else None
    device = clock.device if clock is not None else None
    named = _devices.device_name(device) if device is not None else None
    device_name = named or _cpu_name()
    use_events = bool(clock is not None and clock.uses_events)
    ranks = session.ranks.env if session is not None else RankEnv.detect()
    return Environment(
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        platform=platform.platform(terse=True),
        device=str(device) if device is not None else "cpu",
        device_name=device_name,
        clock="device events (torch.Event)"
        if use_events
        else "host wall clock (time.perf_counter)",
        torch_threads=torch.get_num_threads(),
        cpu_logical=psutil.cpu_count(logical=True) or 1,
        cpu_physical=psutil.cpu_count(logical=False),
        world_size=ranks.world_size,
        rank=ranks.rank,
        local_rank=ranks.local_rank,
        host=platform.node(),
    )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
