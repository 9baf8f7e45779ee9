"""torchdoctor.trace: read torch.profiler (Kineto) traces into compact per-rank tables."""

from ._reader import EventStream, TraceFormatError, iter_events
from ._tables import RankTrace, find_trace_files, load_trace

__all__ = [
    "EventStream",
    "RankTrace",
    "TraceFormatError",
    "find_trace_files",
    "iter_events",
    "load_trace",
]
