"""``torchdoctor run --whole`` in the record: every second of a run, from its process's start to
its end, put down to one kind of cost (docs/whole-run.md). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

#: The kinds a whole run's seconds go to, in the order they are shown.
WholeKindName = Literal[
    "startup",
    "steps",
    "slow-steps",
    "epoch-boundary",
    "evaluation",
    "checkpoint",
    "between-steps",
    "tail",
]
WHOLE_KINDS: tuple[str, ...] = get_args(WholeKindName)


@dataclass
class WholeKind:
    """The seconds of one kind of cost (``between-steps``: one entry per function of the user's)."""

    kind: WholeKindName
    seconds: float
    #: How many: training steps, slow steps, epoch boundaries, evaluation passes, saves, or the
    #: stretches of time between steps a function of the user's was seen in.
    count: int = 0
    #: Where in the user's code, ``file:line (function)``, when it is one place.
    where: str | None = None
    #: What to change, in words or code, when something can be.
    fix: str | None = None
    #: Seconds of this run the fix would have saved at most, as measured.
    saves_s: float | None = None
    #: What was measured, in words (``3 epochs, 2.1 s each``).
    detail: str = ""


@dataclass
class WholeBlock:
    """A stretch of consecutive steps, for the run's step-time series (bounded: blocks merge in
    pairs as a long run goes on)."""

    #: When its last step ended, seconds since the process started.
    end_s: float
    steps: int
    #: The median step of the block (ms), evaluation, saves and epoch boundaries left out.
    step_ms: float
    #: The process's resident memory when the block ended (MB).
    rss_mb: float | None = None
    #: The host's memory still available then (MB; ``None`` in records before it).
    free_mb: float | None = None


@dataclass
class WholeEvent:
    """One stretch of the run that was not a step at the steady pace, for the timelines."""

    kind: WholeKindName
    #: Seconds since the process started.
    start_s: float
    seconds: float


@dataclass
class WholeRun:
    """Where the whole run's wall time went (``run --whole``)."""

    #: From the process's start to the script's end (or to where the run was cut off).
    wall_s: float
    #: ``steps`` seconds over ``wall_s``: the share of the run spent training at the steady pace.
    goodput: float
    #: Training steps taken.
    steps: int = 0
    #: The run's steady step (ms): the median of its steps.
    steady_step_ms: float | None = None
    categories: list[WholeKind] = field(default_factory=list)
    #: The step-time series, oldest first.
    series: list[WholeBlock] = field(default_factory=list)
    #: ``ended``: the script ended on its own; ``cut``: the run was ended before (the bound, a
    #: signal, a crash): the projection says what a whole run would give.
    ending: Literal["ended", "cut"] = "ended"
    #: For a cut run with a full period seen (an epoch or more): the goodput a long run would
    #: reach, startup paid once, the rest repeating as observed.
    projected_goodput: float | None = None
    #: The assumptions of the projection, in words.
    projection: str = ""
    #: Epochs of the training loader that ended.
    epochs: int = 0
    #: When things other than steady steps happened (startup, evaluations, saves, boundaries,
    #: slow steps, tail), oldest first; at most 5,000, the later ones counted in
    #: ``events_dropped``.
    events: list[WholeEvent] = field(default_factory=list)
    events_dropped: int = 0
    #: When the process started, on the machine's monotonic clock (s): lines up the events of
    #: the ranks of a job on one machine.
    started_at_s: float | None = None
    #: Interval between two samples of the script's stack (s): the finest grain of the kinds found
    #: by sampling (startup's parts, between-steps, a save function's own work).
    sample_interval_s: float = 0.0

    def seconds_of(self, kind: str) -> float:
        return sum(c.seconds for c in self.categories if c.kind == kind)
