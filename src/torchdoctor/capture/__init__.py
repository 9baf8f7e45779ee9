"""torchdoctor.capture: live instrumentation of a running script (the only place that patches
torch)."""

from torchdoctor.capture.syncs import SyncEvent, SyncWatcher, find_syncs, watch_syncs

__all__ = ["SyncEvent", "SyncWatcher", "find_syncs", "watch_syncs"]
