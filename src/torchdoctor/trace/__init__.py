"""torchdoctor.trace: read torch.profiler (Kineto) traces into compact per-rank tables."""

from ._files import find_trace_files
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
    load_trace,
)
from ._workers import end_with, end_workers, start_worker, worker_code

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
    "end_with",
    "end_workers",
    "find_trace_files",
    "iter_events",
    "load_trace",
    "start_worker",
    "worker_code",
]
