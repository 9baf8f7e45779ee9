"""torchdoctor.capture: live instrumentation of a running script (the only place that patches
torch)."""

from .profiler import StepProfiler
from .syncs import SyncEvent, SyncWatcher, find_syncs, watch_syncs

__all__ = ["StepProfiler", "SyncEvent", "SyncWatcher", "find_syncs", "watch_syncs"]
