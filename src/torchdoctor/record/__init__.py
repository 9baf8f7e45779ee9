"""The run record: plain dataclasses that hold every measured number, saved as JSON.

A record is produced once (by ``torchdoctor run``, ``watch()`` or ``analyze``) and rendered
many times (``torchdoctor report PATH``). Nothing here imports torch. The JSON layout is
documented in ``docs/record.md``; this package is its only door.
"""

from __future__ import annotations

from ._kinds import (
    FINDING_KINDS,
    LOADER_FINDING_KINDS,
    SEVERITIES,
    STATUSES,
    SYNC_FINDING_KINDS,
    TRACE_FINDING_KINDS,
    VERDICT_KINDS,
    FindingKind,
    Severity,
    Status,
    VerdictKind,
)
from ._loader import (
    DEFAULT_PICK_TOLERANCE,
    BatchLeaf,
    CopyOnRead,
    LoaderMemory,
    LoaderReport,
    SweepPoint,
    TransformCost,
    WorkerMemorySeries,
    WorkerSweep,
)
from ._run import (  # FixTrial too: _run must be imported before _fix (see _run's end)
    STEP_PARTS,
    Environment,
    Finding,
    FixTrial,
    LoaderAlone,
    LoaderSettings,
    RunRecord,
    Stat,
    StepSeries,
    SystemUsage,
    Verdict,
)
from ._serial import SCHEMA_VERSION, RecordError, write_json_atomic

__all__ = [
    "DEFAULT_PICK_TOLERANCE",
    "FINDING_KINDS",
    "LOADER_FINDING_KINDS",
    "SCHEMA_VERSION",
    "SEVERITIES",
    "STATUSES",
    "STEP_PARTS",
    "SYNC_FINDING_KINDS",
    "TRACE_FINDING_KINDS",
    "VERDICT_KINDS",
    "BatchLeaf",
    "CopyOnRead",
    "Environment",
    "Finding",
    "FindingKind",
    "FixTrial",
    "LoaderAlone",
    "LoaderMemory",
    "LoaderReport",
    "LoaderSettings",
    "RecordError",
    "RunRecord",
    "Severity",
    "Stat",
    "Status",
    "StepSeries",
    "SweepPoint",
    "SystemUsage",
    "TransformCost",
    "Verdict",
    "VerdictKind",
    "WorkerMemorySeries",
    "WorkerSweep",
    "write_json_atomic",
]
