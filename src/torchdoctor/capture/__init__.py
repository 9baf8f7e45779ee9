"""torchdoctor.capture: live measurement of a running script (the only place that patches torch).

The loader doctor's measurements (clones, sweeps, transform costs, worker memory) live in
:mod:`torchdoctor.loader`."""

from ..report.timeline import timeline, write_timeline
from ._collectives import manual_collectives_finding
from ._data import StepMarks
from ._environment import detect_environment
from ._frames import innermost_user_line
from ._held import held_by_category
from ._inloop_sweep import InLoopSweep
from ._loop_shapes import evaluation_finding
from ._patch import Patcher, raised_by_torchdoctor
from ._sampler import lower_thread_priority
from ._session import CaptureSession, Listener, ProgressFn, StopRun, active_session
from ._timeline import parts_from_marks
from .phases import Phase
from .profiler import StepProfiler
from .syncs import SyncEvent, SyncWatcher, find_syncs, watch_syncs

__all__ = [
    "manual_collectives_finding",
    "evaluation_finding",
    "CaptureSession",
    "InLoopSweep",
    "Listener",
    "StepMarks",
    "parts_from_marks",
    "Phase",
    "Patcher",
    "ProgressFn",
    "StepProfiler",
    "StopRun",
    "SyncEvent",
    "SyncWatcher",
    "active_session",
    "detect_environment",
    "find_syncs",
    "held_by_category",
    "innermost_user_line",
    "lower_thread_priority",
    "raised_by_torchdoctor",
    "timeline",
    "watch_syncs",
    "write_timeline",
]
