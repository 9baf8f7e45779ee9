"""torchdoctor.analysis: pure functions from measurements, events and traces to findings and
verdicts (no torch import)."""

from .loader_memory import describe_batch, detect_copy_on_read, dtype_advice, loader_memory
from .syncs import sync_findings
from .trace_analysis import analyse_traces, analyze_trace
from .transforms import TransformCost, transform_findings
from .worker_sweep import (
    SweepPolicy,
    WorkerSweep,
    fix_code,
    fix_settings,
    predicted_step_ms,
    sweep_advice,
    sweep_candidates,
)

__all__ = [
    "SweepPolicy",
    "TransformCost",
    "WorkerSweep",
    "analyse_traces",
    "analyze_trace",
    "describe_batch",
    "detect_copy_on_read",
    "dtype_advice",
    "fix_code",
    "fix_settings",
    "loader_memory",
    "predicted_step_ms",
    "sweep_advice",
    "sweep_candidates",
    "sync_findings",
    "transform_findings",
]
