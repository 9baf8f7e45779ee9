"""torchdoctor.trace: read torch.profiler (Kineto) traces into compact per-rank tables."""

from ._reader import EventStream, TraceFormatError, iter_events
from ._tables import (
    CAT_CPU_OP,
    CAT_DRIVER,
    CAT_GPU_USER_ANNOTATION,
    CAT_KERNEL,
    CAT_MEMCPY,
    CAT_MEMSET,
    CAT_PYTHON,
    CAT_RUNTIME,
    CAT_SYNC,
    CAT_USER_ANNOTATION,
    CATEGORY_ALIASES,
    RankTrace,
    find_trace_files,
    load_trace,
)

__all__ = [
    "CAT_CPU_OP",
    "CAT_DRIVER",
    "CAT_GPU_USER_ANNOTATION",
    "CAT_KERNEL",
    "CAT_MEMCPY",
    "CAT_MEMSET",
    "CAT_PYTHON",
    "CAT_RUNTIME",
    "CAT_SYNC",
    "CAT_USER_ANNOTATION",
    "CATEGORY_ALIASES",
    "EventStream",
    "RankTrace",
    "TraceFormatError",
    "find_trace_files",
    "iter_events",
    "load_trace",
]
