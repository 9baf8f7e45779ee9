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
#: How the diagnosed script ended, as far as the record knows. Each word is written here once;
#: code names them by the constants below (decided in ``process.ending``, docs/cli.md).
Status = Literal[
    "complete",
    "partial",
    "interrupted",
    "script-error",
    "no-training",
    "internal-error",
    "killed",
    "timed-out",
    "out-of-memory",
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
LoopFindingKind = Literal[
    "loop.never-updates", "loop.evaluation-in-step", "loop.graph-kept", "loop.memory-creep"
]
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

#: The measurement finished: torchdoctor stopped the script on purpose (or a whole run ended).
COMPLETE: Status = "complete"
#: The script ended on its own after some measured steps (its data or epochs ran out).
PARTIAL: Status = "partial"
#: Ctrl-C or SIGTERM stopped the run.
INTERRUPTED: Status = "interrupted"
#: The script raised, or called ``sys.exit(n)`` with n other than 0.
SCRIPT_ERROR: Status = "script-error"
#: The script ended without a measured step.
NO_TRAINING: Status = "no-training"
#: torchdoctor itself failed (torch was restored).
INTERNAL_ERROR: Status = "internal-error"
#: The script's process ended without a last word (a signal, the OOM killer, ``os._exit``).
KILLED: Status = "killed"
#: The run reached ``--max-seconds``.
TIMED_OUT: Status = "timed-out"
#: The script ran out of memory: a device's (``torch.OutOfMemoryError``) or the host's (an
#: allocation refused, ``MemoryError``).
OUT_OF_MEMORY: Status = "out-of-memory"
#: Which status names a run whose parts ended differently (a job's ranks, a decision with
#: several causes), worst first: torchdoctor's own failure hides everything behind it, a script's
#: failure a stop, a stop a run that ran out on its own.
STATUS_PRECEDENCE: tuple[Status, ...] = (
    INTERNAL_ERROR,
    OUT_OF_MEMORY,
    SCRIPT_ERROR,
    KILLED,
    TIMED_OUT,
    INTERRUPTED,
    PARTIAL,
    NO_TRAINING,
    COMPLETE,
)
#: The statuses of a run that ended before its measurement did (a snapshot of a run still in
#: progress is ``PARTIAL`` too): a verdict on few steps says how to get more.
ENDED_SHORT: tuple[Status, ...] = (
    SCRIPT_ERROR,
    OUT_OF_MEMORY,
    KILLED,
    INTERNAL_ERROR,
    PARTIAL,
    TIMED_OUT,
    INTERRUPTED,
)
#: Why a run ended, one level below its status (``Ending.cause``): what ended it.
EndingCause = Literal[
    "measured",  # torchdoctor stopped it on purpose, the measurement done
    "script-end",  # the script ended on its own (finished, sys.exit(0), a whole run's end)
    "raised",  # the script raised
    "out-of-memory",  # the script ran out of memory (device or host)
    "exited",  # sys.exit(n), n other than 0
    "ctrl-c",  # KeyboardInterrupt in the script's own process
    "bound",  # --max-seconds
    "signal",  # a signal torchdoctor received and handed on
    "late-signal",  # a signal that arrived as the script ended (the record is whole)
    "process-died",  # the process ended without a last word
    "peer-lost",  # another rank of the job ended (a follower, never the cause)
    "uneven-join",  # a rank's data ran out under Join first: stopped where Join let all go
    "rank-ended",  # a rank of the job ended it (raised, exited, was killed)
    "other-node",  # a rank of another node ended the job
    "torchdoctor",  # torchdoctor's own failure
    "launcher",  # the launcher ended before any rank started
]

VERDICT_KINDS: tuple[str, ...] = get_args(VerdictKind)
ENDING_CAUSES: tuple[str, ...] = get_args(EndingCause)
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
