"""torchdoctor.capture: live measurement of a running script (the only place that patches torch).

The loader doctor's measurements (clones, sweeps, transform costs, worker memory) live in
:mod:`torchdoctor.loader`."""

from ._session import CaptureSession, ProgressFn, StopRun, active_session
from .phases import Phase
from .profiler import StepProfiler
from .syncs import SyncEvent, SyncWatcher, find_syncs, watch_syncs

__all__ = [
    "CaptureSession",
    "Phase",
    "ProgressFn",
    "StepProfiler",
    "StopRun",
    "SyncEvent",
    "SyncWatcher",
    "active_session",
    "find_syncs",
    "watch_syncs",
]
