"""The job section of a distributed run's record: one entry per rank, the stragglers, the
communication made free (docs/distributed.md). Nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._kinds import COMPLETE, Status
from ._stats import Stat, StepSeries
from ._verdict import Verdict

#: ``RankRun.role`` of the rank whose own work is slowest, and of the ranks that wait for it.
STRAGGLER = "straggler"
WAITS = "waits"


@dataclass
class RankRun:
    """One rank of the job, as it measured itself."""

    rank: int
    local_rank: int = 0
    host: str = ""
    status: Status = COMPLETE
    #: Each measured step's parts, as the single-process record holds them.
    steps: StepSeries = field(default_factory=StepSeries)
    step_ms: Stat | None = None
    parts_ms: dict[str, Stat] = field(default_factory=dict)
    model_alone_step_ms: Stat | None = None
    #: Steps under DDP's ``no_sync()``: the step with communication made free.
    no_sync: list[float] = field(default_factory=list)
    no_sync_step_ms: Stat | None = None
    #: Mean ms per step in the collectives the script calls itself (none: it calls none).
    collectives_ms: float | None = None
    #: Mean ms per step in the collectives torch's parallel code issued (FSDP2's; none: none).
    torch_collectives_ms: float | None = None
    #: Mean step less mean no-sync step: time in communication or waiting in it for other ranks.
    comm_ms: float | None = None
    #: The rank's own work per step: its mean no-sync step, or, without that phase, its mean step
    #: less the backward (and forward) time it spends beyond the fastest rank's.
    own_ms: float | None = None
    #: The verdict of this rank's own steps alone.
    verdict: Verdict | None = None
    #: ``"straggler"``, ``"waits"`` (for a straggler), or ``""``.
    role: str = ""
    #: How the rank's process ended, in the report's words.
    ended: str = ""
    #: The traceback of a rank whose script raised (its lines).
    error: list[str] = field(default_factory=list)
    #: Where it was when torchdoctor stopped the job (``file:line in function (source)``), and
    #: whether it was waiting in a collective then.
    stopped_at: str = ""
    in_collective: bool = False
    #: ``run --whole``: the rank's goodput and wall time (its accounts are in its own record).
    goodput: float | None = None
    wall_s: float | None = None
    #: ``run --whole``: the rank's seconds by kind.
    whole_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Straggler:
    """A rank whose own work per step is slower than the others', and who waits for it."""

    rank: int
    #: The step part in which it is slowest compared with the other ranks.
    part: str
    #: Its own work per step less the median of the others'.
    excess_ms: float
    #: The ranks that wait for it in the collectives.
    victims: list[int] = field(default_factory=list)
    #: Their mean time per step in communication or waiting for it.
    wait_ms: float = 0.0


@dataclass
class ProjectedScale:
    """The job's step projected to ``ranks`` ranks (``analysis.projection``)."""

    ranks: int
    #: The step's collectives over that many ranks, modelled (ms).
    comm_ms: float
    #: Own work plus those collectives (ms).
    step_ms: float
    comm_share: float


@dataclass
class Projection:
    """The measured job projected to more ranks on a link, and what the model assumes."""

    #: The link: its name, bandwidth and latency, in words.
    link: str
    own_ms: float
    #: The collectives of one step that are modelled (``all-gather 14 x 0.8 MB``).
    collectives: list[str] = field(default_factory=list)
    scales: list[ProjectedScale] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)


@dataclass
class DistributedReport:
    """The job: every rank's measurements and what they say together."""

    world_size: int
    nnodes: int = 1
    backend: str = ""
    #: The rank whose steps fill the record's top-level series and verdict (the straggler when
    #: there is one, else rank 0).
    bounding_rank: int = 0
    ranks: list[RankRun] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)
    #: Largest less smallest own work per step across ranks.
    skew_ms: float | None = None
    #: The job's step with communication made free: the slowest rank's mean no-sync step.
    no_sync_step_ms: float | None = None
    #: The job's step (the largest rank's mean step: the ranks step together) ÷
    #: ``no_sync_step_ms``: the most that hiding communication could give.
    comm_ceiling: float | None = None
    #: ``no_sync_step_ms`` ÷ the job's step (at most 1): the share of the job's step that is
    #: the slowest rank's own work; 1 is linear scaling.
    scaling_efficiency: float | None = None
    #: Ranks the record has nothing from (their process ended before they sent anything).
    missing_ranks: list[int] = field(default_factory=list)
    #: The step projected to more ranks (``analysis.projection``; default link InfiniBand).
    projection: Projection | None = None
