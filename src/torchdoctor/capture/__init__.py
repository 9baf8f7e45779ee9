"""torchdoctor.capture: live measurement of a running script (the only place that patches torch)."""

from .loader_costs import measure_getitem_costs
from .loader_doctor import LoaderDiagnosis, diagnose_loader
from .loader_sweep import clone_loader, measure_loader, sample_batch, shutdown_workers, sweep_loader
from .profiler import StepProfiler
from .syncs import SyncEvent, SyncWatcher, find_syncs, watch_syncs
from .worker_memory import WorkerMemorySampler, sample_worker_memory

__all__ = [
    "LoaderDiagnosis",
    "StepProfiler",
    "SyncEvent",
    "SyncWatcher",
    "WorkerMemorySampler",
    "clone_loader",
    "diagnose_loader",
    "find_syncs",
    "measure_getitem_costs",
    "measure_loader",
    "sample_batch",
    "sample_worker_memory",
    "shutdown_workers",
    "sweep_loader",
    "watch_syncs",
]
