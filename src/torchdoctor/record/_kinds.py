"""The record's vocabularies, each written once: verdict kinds, statuses, severities, finding kinds.

Every place that makes or reads one of these values imports it from here, ``Finding`` rejects a
kind that is not listed, and ``tests/unit/record/test_record_doc.py`` checks ``docs/record.md``
against these tuples, so a new kind is added here first, then documented.
"""

from __future__ import annotations

from typing import Literal, get_args

VerdictKind = Literal[
    "INPUT-BOUND", "COMPUTE-BOUND", "HOST-BOUND", "COMMUNICATION-BOUND", "UNKNOWN"
]
#: How the diagnosed script ended, as far as the record knows.
Status = Literal[
    "complete",
    "partial",
    "interrupted",
    "script-error",
    "no-training",
    "internal-error",
    "killed",
    "timed-out",
]
Severity = Literal["info", "warning", "critical"]
#: What ends a training step (docs/record.md): an optimizer's ``step()``, in loops without one
#: the loss's backward call(s), and in loops without backward a call of the outermost module.
StepBoundaryKind = Literal["optimizer", "backward", "forward"]

#: Host syncs and copies seen in the step (docs/syncs.md).
SyncFindingKind = Literal[
    "item",
    "scalar-conversion",
    "tensor-branch",
    "tensor-assert",
    "tolist",
    "to-host",
    "print-tensor",
    "nonzero",
    "masked-select",
    "boolean-mask-index",
    "unique",
    "data-dependent-shape",
    "cuda-synchronize",
    "python-index",
    "tensor-from-python-data",
    "host-tensor-to-device",
    "constant-rebuilt",
]
#: The loader doctor's findings (docs/loader.md).
LoaderFindingKind = Literal[
    "loader.num_workers",
    "loader.num_threads",
    "loader.persistent_workers",
    "loader.pin_memory",
    "loader.prefetch_factor",
    "loader.costly_transform",
    "loader.dtype",
    "loader.copy_on_read",
]
#: Findings read from a profiler trace (docs/analyze.md).
TraceFindingKind = Literal[
    "host-sync",
    "no-stacks",
    "pageable-memcpy",
    "launch-bound",
    "dataloader",
    "comm-overlap",
    "straggler",
]
#: A distributed job's findings (docs/distributed.md); a straggler is ``"straggler"``.
DistributedFindingKind = Literal[
    "ddp.data-parallel",
    "ddp.no-distributed-sampler",
    "ddp.device",
    "ddp.accumulation-sync",
    "ddp.find-unused-parameters",
    "ddp.buckets",
    "ddp.uneven-inputs",
    "ddp.manual-collectives",
]
#: What the training loop itself does wrong (docs/how-it-works.md).
LoopFindingKind = Literal["loop.never-updates"]
#: The course of a whole run (``run --whole``, docs/whole-run.md).
WholeFindingKind = Literal["whole.drift", "whole.memory-creep", "whole.eval-mode-training"]
FindingKind = Literal[
    SyncFindingKind,
    LoaderFindingKind,
    TraceFindingKind,
    DistributedFindingKind,
    LoopFindingKind,
    WholeFindingKind,
]

INPUT_BOUND: VerdictKind = "INPUT-BOUND"
COMPUTE_BOUND: VerdictKind = "COMPUTE-BOUND"
HOST_BOUND: VerdictKind = "HOST-BOUND"
COMMUNICATION_BOUND: VerdictKind = "COMMUNICATION-BOUND"
UNKNOWN: VerdictKind = "UNKNOWN"

VERDICT_KINDS: tuple[str, ...] = get_args(VerdictKind)
STATUSES: tuple[str, ...] = get_args(Status)
SEVERITIES: tuple[str, ...] = get_args(Severity)
STEP_BOUNDARY_KINDS: tuple[str, ...] = get_args(StepBoundaryKind)
SYNC_FINDING_KINDS: tuple[str, ...] = get_args(SyncFindingKind)
LOADER_FINDING_KINDS: tuple[str, ...] = get_args(LoaderFindingKind)
TRACE_FINDING_KINDS: tuple[str, ...] = get_args(TraceFindingKind)
DISTRIBUTED_FINDING_KINDS: tuple[str, ...] = get_args(DistributedFindingKind)
LOOP_FINDING_KINDS: tuple[str, ...] = get_args(LoopFindingKind)
WHOLE_FINDING_KINDS: tuple[str, ...] = get_args(WholeFindingKind)
FINDING_KINDS: tuple[str, ...] = (
    SYNC_FINDING_KINDS
    + LOADER_FINDING_KINDS
    + TRACE_FINDING_KINDS
    + DISTRIBUTED_FINDING_KINDS
    + LOOP_FINDING_KINDS
    + WHOLE_FINDING_KINDS
)
