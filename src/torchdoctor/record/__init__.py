"""The run record: plain dataclasses that hold every measured number, saved as JSON.

A record is produced once (by ``torchdoctor run``, ``watch()`` or ``analyze``) and rendered
many times (``torchdoctor report PATH``). Nothing here imports torch. The JSON layout is
documented in ``docs/record.md``; this package is its only door.
"""

from __future__ import annotations

from ._kinds import (
    COMMUNICATION_BOUND,
    COMPUTE_BOUND,
    FINDING_KINDS,
    HOST_BOUND,
    INPUT_BOUND,
    LOADER_FINDING_KINDS,
    SEVERITIES,
    STATUSES,
    SYNC_FINDING_KINDS,
    TRACE_FINDING_KINDS,
    UNKNOWN,
    VERDICT_KINDS,
    FindingKind,
    Severity,
    Status,
    VerdictKind,
)
from ._run import (
    STEP_PARTS,
    Environment,
    Finding,
    LoaderAlone,
    LoaderSettings,
    RunRecord,
    Stat,
    StepSeries,
    SystemUsage,
)
from ._serial import SCHEMA_VERSION, RecordError, write_json_atomic
from ._trace import (
    CommOverlap,
    IdleBreakdown,
    KernelStat,
    LaunchStats,
    PageableCopies,
    ParseStats,
    RankReport,
    RankSkew,
    SyncReport,
    SyncSite,
    TemporalBreakdown,
    TraceReport,
    TraceStep,
)
from ._verdict import Verdict

__all__ = [
    "COMMUNICATION_BOUND",
    "COMPUTE_BOUND",
    "HOST_BOUND",
    "INPUT_BOUND",
    "UNKNOWN",
    "FINDING_KINDS",
    "LOADER_FINDING_KINDS",
    "SCHEMA_VERSION",
    "SEVERITIES",
    "STATUSES",
    "STEP_PARTS",
    "SYNC_FINDING_KINDS",
    "TRACE_FINDING_KINDS",
    "VERDICT_KINDS",
    "CommOverlap",
    "Environment",
    "Finding",
    "FindingKind",
    "IdleBreakdown",
    "KernelStat",
    "LaunchStats",
    "LoaderAlone",
    "LoaderSettings",
    "PageableCopies",
    "ParseStats",
    "RankReport",
    "RankSkew",
    "RecordError",
    "RunRecord",
    "Severity",
    "Stat",
    "Status",
    "StepSeries",
    "SyncReport",
    "SyncSite",
    "SystemUsage",
    "TemporalBreakdown",
    "TraceReport",
    "TraceStep",
    "Verdict",
    "VerdictKind",
    "write_json_atomic",
]
