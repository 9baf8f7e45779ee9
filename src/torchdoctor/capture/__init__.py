"""torchdoctor.capture: live measurement of a running script (the only place that patches torch)."""

from ._inloop_sweep import counted_steps, warm_steps
from ._session import CaptureSession, ProgressFn, StopRun, active_session
from .loader_costs import measure_getitem_costs
from .loader_doctor import LoaderDiagnosis, diagnose_loader
from .loader_sweep import clone_loader, measure_loader, sample_batch, shutdown_workers, sweep_loader
from .phases import Phase
from .profiler import StepProfiler
from .syncs import SyncEvent, SyncWatcher, find_syncs, watch_syncs
from .worker_memory import WorkerMemorySampler, sample_worker_memory

__all__ = [
    "CaptureSession",
    "LoaderDiagnosis",
    "Phase",
    "ProgressFn",
    "StepProfiler",
    "StopRun",
    "SyncEvent",
    "SyncWatcher",
    "WorkerMemorySampler",
    "active_session",
    "clone_loader",
    "counted_steps",
    "diagnose_loader",
    "find_syncs",
    "measure_getitem_costs",
    "measure_loader",
    "sample_batch",
    "sample_worker_memory",
    "shutdown_workers",
    "sweep_loader",
    "warm_steps",
    "watch_syncs",
]
