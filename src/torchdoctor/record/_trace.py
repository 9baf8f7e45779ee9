"""The trace report: what ``torchdoctor analyze`` (and ``run --trace``) read in profiler traces.

The analyses in :mod:`torchdoctor.analysis` (trace_gpu, trace_steps, trace_host, trace_comm)
return these dataclasses directly, so a result has one shape from the analysis to the JSON file
and back. Field names are the keys schema 1 wrote under ``extra["trace"]``, so a v1 record loads
into them unchanged. Dicts keyed by a rank label, a step part, a kernel type or a threshold name
stay dicts: their keys are data, not schema. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._verdict import Verdict


@dataclass
class TemporalBreakdown:
    """Where the GPU's time went over the kernel span of one rank (HTA's definitions)."""

    rank: str
    kernel_span_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    #: busy time by kernel type (union within each type)
    by_type_us: dict[str, float] = field(default_factory=dict)


@dataclass
class IdleBreakdown:
    """GPU idle time of one rank split by cause, per stream and in total."""

    rank: str
    #: stream id (as a string: JSON keys are strings) -> category -> idle microseconds
    streams_us: dict[str, dict[str, float]]
    total_us: dict[str, float]
    #: share of each category in the rank's idle time, percent
    share_pct: dict[str, float]


@dataclass
class SyncSite:
    """Host syncs grouped by where they came from."""

    call: str
    count: int
    blocked_ms: float
    file: str | None = None
    line: int | None = None
    function: str | None = None
    #: outer and inner PyTorch op around the call, e.g. aten::item > aten::_local_scalar_dense
    ops: str | None = None


@dataclass
class SyncReport:
    """Runtime calls that blocked the host until the device caught up, by call site."""

    count: int
    blocked_ms: float
    sites: list[SyncSite] = field(default_factory=list)
    #: whether the trace holds Python stacks (without them, sites cannot name a line)
    has_stacks: bool = False


@dataclass
class PageableCopies:
    """GPU copies from or to pageable (unpinned) host memory, which cannot overlap compute."""

    count: int
    total_ms: float
    megabytes: float
    #: direction (``HtoD``, ``DtoH``...) -> copies
    directions: dict[str, int] = field(default_factory=dict)


@dataclass
class LaunchStats:
    """Kernel durations against the host time spent launching them."""

    kernels: int
    short_kernels: int
    short_share: float
    median_kernel_us: float
    kernel_ms: float
    launch_ms: float
    launches: int
    launch_over_gpu: float
    launch_bound: bool


@dataclass
class KernelStat:
    """One kernel name's GPU time over the whole trace (a row of the top-kernels table)."""

    name: str
    count: int
    total_ms: float
    mean_us: float
    #: share of all kernel time, percent
    share_pct: float


@dataclass
class CommOverlap:
    """Communication kernels of one rank and how much of them ran under computation."""

    comm_ms: float
    compute_ms: float
    overlapped_ms: float
    #: share of communication time that overlapped computation (HTA's comm_comp_overlap)
    overlap_pct: float
    #: communication time with no computation under it, as a share of the kernel span
    exposed_pct: float


@dataclass
class RankSkew:
    """The ranks side by side: their step times, their own work, and the straggler if any.

    ``median_step_ms``, ``slowest``, ``fastest`` and ``skew`` describe the step wall times.
    Under synchronous data parallelism those barely differ (every rank waits for the slowest
    in the collectives), so the straggler is found from each rank's **own work** per step: its
    mean step less its exposed communication (communication kernels with no computation under
    them, which is where a rank waits for the others). Records written before these fields
    existed load with them empty.
    """

    #: rank label -> median step, ms
    median_step_ms: dict[str, float]
    slowest: str
    fastest: str
    #: (slowest - fastest) / fastest, on median steps
    skew: float
    #: whether ``straggler_rank`` is a straggler (its own work is clearly the largest)
    straggler: bool
    #: rank label -> mean step less exposed communication per step, ms
    own_ms: dict[str, float] = field(default_factory=dict)
    #: rank label -> exposed communication per step, ms
    exposed_comm_ms: dict[str, float] = field(default_factory=dict)
    #: the straggler's label ("" without one)
    straggler_rank: str = ""
    #: the step part (``dataloader``, ``gpu_kernels``...) in which it is slowest against the others
    part: str = ""
    #: its own work per step less the median of the other ranks', ms
    excess_ms: float = 0.0
    #: the ranks that wait for it
    waiting: list[str] = field(default_factory=list)
    #: their mean wait per step: extra exposed communication, plus any shorter step, ms
    wait_ms: float = 0.0


@dataclass
class ParseStats:
    """How much trace JSON was parsed and how long it took (the reader's own cost)."""

    mb: float
    seconds: float


@dataclass
class TraceStep:
    """One ProfilerStep of a rank: its wall time and the parts that claimed it, in ms."""

    name: str
    wall_ms: float
    #: step part (``gpu_kernels``, ``cpu_ops``...) -> ms; the parts sum to ``wall_ms``
    parts_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class RankReport:
    """Every analysis of one rank's trace file."""

    #: how the rank is shown: ``rank N``, or the file's stem when the trace has no rank
    label: str
    rank: int | None
    world_size: int | None
    path: str
    events: int
    device: str | None
    has_gpu: bool
    steps: list[TraceStep]
    #: steps summed into the totals (the last one is left out when there are several)
    analysed_steps: int
    step_parts_ms: dict[str, float]
    step_wall_ms: float
    #: step part -> share (0..1) of the analysed wall time
    step_shares: dict[str, float]
    temporal: TemporalBreakdown | None
    idle: IdleBreakdown | None
    syncs: SyncReport
    pageable_memcpy: PageableCopies
    launch: LaunchStats
    top_kernels: list[KernelStat]
    dataloader_share: float
    comm: CommOverlap | None
    notes: list[str] = field(default_factory=list)
    parse: ParseStats | None = None


@dataclass
class TraceReport:
    """The analysis of one trace file per rank, with the trace's own verdict.

    In a ``run --trace`` record the run keeps its own verdict (it measured more than a trace
    shows) and this one sits here; in an ``analyze`` record both are the same.
    """

    #: the trace files analysed, one per rank
    files: list[str] = field(default_factory=list)
    ranks: list[RankReport] = field(default_factory=list)
    #: per-rank step spread; ``None`` with fewer than two ranks
    skew: RankSkew | None = None
    include_last_step: bool = False
    #: every named threshold the analyses used, by its name in the code
    thresholds: dict[str, float] = field(default_factory=dict)
    verdict: Verdict | None = None
    parse: ParseStats | None = None
    #: the files ``run --trace`` recorded (kept even when their analysis failed)
    recorded_files: list[str] = field(default_factory=list)

    @property
    def analysed(self) -> bool:
        """Whether the traces were analysed (a failed analysis keeps only ``recorded_files``)."""
        return bool(self.files)
