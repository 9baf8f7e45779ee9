"""torchdoctor.capture: live measurement of a running script (the only place that patches torch).

The loader doctor's measurements (clones, sweeps, transform costs, worker memory) live in
:mod:`torchdoctor.loader`."""

from .profiler import StepProfiler
from .syncs import SyncEvent, SyncWatcher, find_syncs, watch_syncs

__all__ = [
    "StepProfiler",
    "SyncEvent",
    "SyncWatcher",
    "find_syncs",
    "watch_syncs",
]
