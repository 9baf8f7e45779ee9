"""The run record's dataclasses: every measured number of one diagnosis.

Saving and loading go through :mod:`._serial`; the vocabularies (kinds, statuses) through
:mod:`._kinds`. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._ending import Ending
from ._fix import FixTrial
from ._kinds import (
    COMPLETE,
    FINDING_KINDS,
    SEVERITIES,
    FindingKind,
    Severity,
    Status,
    StepBoundaryKind,
)
from ._loader import LoaderReport
from ._memory import MemoryCourse, MemorySplit
from ._patch import Patch
from ._ranks import DistributedReport
from ._serial import SCHEMA_VERSION, load_record, record_from_dict, write_json_atomic
from ._stats import Stat, StepSeries
from ._trace import TraceReport
from ._trials import Flops, Trial
from ._verdict import Verdict
from ._whole import WholeRun


@dataclass
class Finding:
    """One problem found in the run, with where it is and how to fix it."""

    kind: FindingKind
    title: str
    fix: str
    file: str | None = None
    line: int | None = None
    source: str | None = None
    calls_per_step: float | None = None
    #: Estimated or measured cost per step, when known.
    cost_ms: float | None = None
    severity: Severity = "warning"
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in FINDING_KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}: add it to record/_kinds.py")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r} (one of {SEVERITIES})")


def split_where(where: str | None) -> tuple[str | None, int | None]:
    """A place in the script as the record writes it (``"file:line"``, e.g.
    ``LoaderSettings.created_at``) as a finding's ``(file, line)``; ``None`` for what is missing."""
    if not where or ":" not in where:
        return None, None
    file, _, number = where.rpartition(":")
    return file or None, int(number) if number.isdigit() else None


#: ``LoaderSettings.batch_size_source`` when the DataLoader's own ``batch_size`` argument gives
#: it, and when it was measured off the batches.
BATCH_SIZE_ARGUMENT = "batch_size"
BATCH_SIZE_MEASURED = "measured"


@dataclass
class LoaderSettings:
    """The captured DataLoader's settings."""

    dataset: str
    dataset_len: int | None
    #: Samples per batch, wherever the loader keeps it (see ``batch_size_source``).
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    drop_last: bool
    sampler: str
    collate_fn: str
    iterable: bool = False
    #: Where the script builds the DataLoader (``file:line``), when seen.
    created_at: str | None = None
    #: Where ``batch_size`` comes from: ``"batch_size"`` (the DataLoader's argument), the
    #: attribute path of a batch sampler's size (``"batch_sampler.batch_size"``, deeper through
    #: wrappers), ``"measured"`` (the leading dimension of the batches the loader yielded: a
    #: batch sampler naming no size, an iterable dataset that batches itself); ``None`` when not
    #: known.
    batch_size_source: str | None = None


@dataclass
class Environment:
    """Where the run happened."""

    torch_version: str
    python_version: str
    platform: str
    device: str
    device_name: str
    clock: str
    torch_threads: int
    cpu_logical: int
    cpu_physical: int | None
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    #: The machine's name (``platform.node()``): tells the nodes of a job apart.
    host: str = ""


#: A ``seen`` count of a launched rank waiting in Join's loop: the step its data ran out at (gone
#: when Join lets it go). The heartbeat carries it, so a job stopped there keeps where each rank
#: stood even from a rank that sent no last word.
SEEN_IN_JOIN = "in_join_since_step"

#: The shortest window of measured steps whose CPU shares are told. The system's CPU counters
#: (/proc/stat, a process's cpu_times) advance in clock ticks of 10 ms, so over a 3 ms window a
#: busy machine reads 0% as easily as 100%; over 0.5 s the ticks lost at the two ends of the
#: machine's and the script's counters are under 0.1 core, below the verdict's busy threshold.
MIN_CPU_WINDOW_S = 0.5


@dataclass
class ThreadWaits:
    """The script's threads' CPU time, and their time ready to run but waiting for a core (the
    kernel's run-queue time), over the measured steps (``capture._waiting``; Linux only)."""

    #: Seconds the figures were taken over (the measured steps').
    window_s: float
    #: The training thread's CPU seconds and its seconds waiting for a core.
    training_cpu_s: float
    training_waited_s: float
    #: The same summed over the script's threads: this process's (torchdoctor's sampler left
    #: out) and its children's (DataLoader workers).
    threads_cpu_s: float
    threads_waited_s: float

    def waited_share(self) -> float:
        """The training thread's waiting as a share of the window."""
        return self.training_waited_s / self.window_s if self.window_s > 0 else 0.0


@dataclass
class SystemUsage:
    """System utilisation sampled during the measured steps."""

    interval_s: float
    samples: int
    #: Mean busy % of each core, and of all: empty and ``None`` when the steps took too little
    #: time for the system's CPU counters to tell (under :data:`MIN_CPU_WINDOW_S`).
    cpu_percent_per_core: list[float]
    cpu_percent_total: float | None
    main_rss_mb_max: float
    workers: int
    workers_rss_mb_max: float
    #: Per-sample totals, for plotting.
    timeline_s: list[float] = field(default_factory=list)
    main_rss_mb: list[float] = field(default_factory=list)
    workers_rss_mb: list[float] = field(default_factory=list)
    gpu_util_pct: float | None = None
    gpu_mem_mb_max: float | None = None
    #: Cores' worth of CPU that other processes took while the steps were measured: the
    #: machine's busy time less the script's and its workers' (``None``: not measured, or
    #: a window under :data:`MIN_CPU_WINDOW_S`). Steps shorter than that take it over the run
    #: so far, from capture's start (``others_window_s`` says over how long).
    others_cpu_cores: float | None = None
    #: Seconds ``others_cpu_cores`` was taken over.
    others_window_s: float | None = None
    #: The script's threads' work and waiting over the measured steps (``None``: not read).
    waits: ThreadWaits | None = None


@dataclass
class LoaderAlone:
    """The captured DataLoader iterated without the model."""

    batches: int
    seconds: float
    batches_per_s: float
    #: Batches per second the model consumes when data is free (from the model-alone phase).
    needed_batches_per_s: float | None
    first_batch_ms: float | None = None


@dataclass
class RunRecord:
    """Everything one diagnosis measured. Serialised to JSON by :meth:`save`."""

    schema_version: int = SCHEMA_VERSION
    tool_version: str = ""
    created_at: str = ""
    command: list[str] = field(default_factory=list)
    status: Status = COMPLETE
    #: How the run ended, decided once (``process.ending``): its status (``status`` above), exit
    #: status, cause and words; ``None`` in records written before it was kept.
    ending: Ending | None = None
    notes: list[str] = field(default_factory=list)
    env: Environment | None = None
    loader: LoaderSettings | None = None
    warmup_steps: int = 0
    requested_steps: int = 0
    steps: StepSeries = field(default_factory=StepSeries)
    step_ms: Stat | None = None
    parts_ms: dict[str, Stat] = field(default_factory=dict)
    model_alone: list[float] = field(default_factory=list)
    #: The script's steps again right after the model-alone ones (ms): the ceiling's second
    #: bracket (its interval spans both).
    measured_after: list[float] = field(default_factory=list)
    model_alone_step_ms: Stat | None = None
    loader_alone: LoaderAlone | None = None
    ceiling_speedup: float | None = None
    #: A 90% bootstrap interval of ``ceiling_speedup`` (``[low, high]``), from both phases' steps.
    ceiling_interval: list[float] = field(default_factory=list)
    verdict: Verdict | None = None
    findings: list[Finding] = field(default_factory=list)
    system: SystemUsage | None = None
    #: What the capture saw: counts of loaders, optimizers, steps, module calls.
    seen: dict[str, Any] = field(default_factory=dict)
    #: Measurement overheads that were excluded from the step timings, in ms.
    overhead_ms: dict[str, float] = field(default_factory=dict)
    #: Steps watched by the sync finder after warmup (not timed).
    sync_sampled_steps: int = 0
    #: The profiler trace's analysis (``analyze``, ``run --trace``) and the files recorded.
    trace: TraceReport | None = None
    #: The loader doctor's measurements (worker sweep, transform costs, memory), when it ran.
    loader_report: LoaderReport | None = None
    #: The ``--fix`` trial: the advised settings injected into a re-run, and its result.
    fix: FixTrial | None = None
    #: Values of the first losses ``backward`` was called on, in a seeded run
    #: (``torchdoctor fix``'s numerics check); empty otherwise.
    losses: list[float] = field(default_factory=list)
    #: ``torchdoctor fix``: the patch written and each remedy measured on the patched code.
    patch: Patch | None = None
    #: DataLoader settings injected into every loader of this run (a ``--fix`` re-run).
    loader_overrides: dict[str, Any] = field(default_factory=dict)
    #: What ended a step: ``optimizer`` (its ``step()``), ``backward`` (loops that update the
    #: parameters themselves) or ``forward`` (loops without backward).
    step_boundary: StepBoundaryKind = "optimizer"
    #: Backward calls per step when ``step_boundary`` is ``backward``.
    backwards_per_step: int | None = None
    #: What decided the boundary, in words (``SGD.step() returned``; for a fallback, the calls
    #: seen and that no optimizer stepped).
    step_boundary_evidence: str = ""
    #: The script's own functions that build its batches inside the loop (no DataLoader), as
    #: ``name (file:line)``; their time is the step's ``data_wait``.
    built_inputs: list[str] = field(default_factory=list)
    #: ``torch.set_num_threads`` injected at the start of this run (a ``--fix`` re-run), if any.
    threads_override: int | None = None
    #: Step times (ms) under DDP's ``no_sync()``: communication made free (a distributed run).
    no_sync: list[float] = field(default_factory=list)
    #: Where the script was when torchdoctor stopped it (the bound, a signal): the user's
    #: innermost frame as ``file:line in function (source)``; empty when it ended otherwise.
    stopped_at: str = ""
    #: Its main thread's frames then, innermost first (``file:line in function``).
    stopped_stack: list[str] = field(default_factory=list)
    #: The other threads that were running Python then, innermost first (a hook torch ran on
    #: a thread of its own, such as autograd's on an accelerator).
    stopped_threads: list[list[str]] = field(default_factory=list)
    #: Whether it was then waiting in a collective (a torch.distributed call, or backward).
    stopped_in_collective: bool = False
    #: A rank of a job whose ranks' data ran out at different steps under
    #: ``torch.distributed.algorithms.Join``: the optimizer step at which this rank's ran out
    #: (also where the job was stopped while this rank waited in Join's loop).
    joined_at: int | None = None
    #: Per measured step, ms in the ``torch.distributed`` collectives the script calls itself
    #: (``dist.all_reduce`` by hand; not DDP's, which run inside backward); empty when none.
    collectives: list[float] = field(default_factory=list)
    #: Per measured step, ms the step spent in the collectives torch's own parallel code issued
    #: (FSDP2's all-gathers and reduce-scatters: their blocking calls, and the waits on their
    #: works); empty when none.
    torch_collectives: list[float] = field(default_factory=list)
    #: Those collectives by kind (``all_gather``, ``reduce_scatter``...): ``calls``, ``bytes``
    #: (of each call's largest buffer) and ``ms``, per measured step.
    torch_collective_kinds: dict[str, dict[str, float]] = field(default_factory=dict)
    #: A distributed job: every rank, stragglers, communication (docs/distributed.md).
    distributed: DistributedReport | None = None
    #: ``run --try``: each lever measured in the script's loop, best first (docs/trials.md).
    trials: list[Trial] = field(default_factory=list)
    #: The trials' baseline: steps of the script as it runs, taken right before each lever and
    #: after the last (ms); each lever is compared with the ones next to it.
    trial_baseline: list[float] = field(default_factory=list)
    #: FLOPs of one step (``FlopCounterMode``), when counted (``--try``, ``--flops``).
    flops_per_step: float | None = None
    #: The step's FLOPs, achieved FLOP/s and utilisation against a peak.
    flops: Flops | None = None
    #: ``run --whole``: every second of the run by kind of cost (docs/whole-run.md).
    whole_run: WholeRun | None = None
    #: One untimed step's memory by kind, and the blocks with the most activations
    #: (docs/memory.md); ``None`` when not watched.
    memory_split: MemorySplit | None = None
    #: The memory in use over the measured steps (docs/memory.md): a step that keeps what it
    #: made is a ``loop.memory-creep`` finding; ``None`` when not read.
    memory_course: MemoryCourse | None = None

    @property
    def measured_steps(self) -> int:
        return len(self.steps)

    @property
    def is_trace_analysis(self) -> bool:
        """Whether this is an ``analyze`` record: a profiler trace read, no script run (its steps
        are the trace's, its parts the trace's own; a ``run --trace`` record has both)."""
        return (
            self.trace is not None
            and self.trace.analysed
            and self.env is None
            and not self.parts_ms
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, including derived ``measured_steps``."""
        out = dataclasses.asdict(self)
        out["measured_steps"] = self.measured_steps
        return out

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the record as JSON atomically (temp file, then rename)."""
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """Rebuild a record from :meth:`to_dict` output (of this or an older schema).

        Raises:
            RecordError: when ``data`` is not a torchdoctor record of a known schema.
        """
        return record_from_dict(cls, data)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        """Read a record saved by :meth:`save`.

        Raises:
            RecordError: when the file is missing, not JSON, or not a record.
        """
        return load_record(cls, path)
