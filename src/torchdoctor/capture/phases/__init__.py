"""The capture's phases, in the order they run. A new phase is one module here and one entry in
:data:`PHASES` (see ``docs/architecture.md``)."""

from __future__ import annotations

from .base import NOT_SERVED, Done, Phase
from .flops import FlopsPhase
from .loader_alone import LoaderAlonePhase, measure_loader_alone
from .loader_doctor import LoaderDoctorPhase
from .measure import MeasurePhase
from .measure_again import MeasureAgainPhase
from .model_alone import ModelAlonePhase
from .no_sync import NoSyncPhase
from .sync_sample import SyncSamplePhase
from .trace import TracePhase
from .trials import TrialsPhase
from .warmup import WarmupPhase
from .whole import WholeRunPhase, watch_whole_run
from .worker_sweep import WorkerSweepPhase

#: ``run --whole``'s table: one phase that never ends the script.
WHOLE_PHASES: tuple[type[Phase], ...] = (WholeRunPhase,)

#: The table the session runs, in order.
PHASES: tuple[type[Phase], ...] = (
    WarmupPhase,
    SyncSamplePhase,
    TracePhase,
    MeasurePhase,
    ModelAlonePhase,
    MeasureAgainPhase,
    NoSyncPhase,
    FlopsPhase,
    TrialsPhase,
    WorkerSweepPhase,
    LoaderAlonePhase,
    LoaderDoctorPhase,
)

__all__ = [
    "NOT_SERVED",
    "PHASES",
    "WHOLE_PHASES",
    "Done",
    "FlopsPhase",
    "LoaderAlonePhase",
    "LoaderDoctorPhase",
    "MeasureAgainPhase",
    "MeasurePhase",
    "ModelAlonePhase",
    "NoSyncPhase",
    "Phase",
    "SyncSamplePhase",
    "TracePhase",
    "TrialsPhase",
    "WarmupPhase",
    "WholeRunPhase",
    "WorkerSweepPhase",
    "measure_loader_alone",
    "watch_whole_run",
]
