"""``run --whole``'s accounts as the capture keeps them, before analysis turns them into a
:class:`~torchdoctor.record.WholeRun` (docs/whole-run.md). Torch-free.

The capture's accountant (:class:`~torchdoctor.capture._whole.WholeRunWatch`) makes one of these
at the run's end, and every few seconds while it runs: the live one crosses from the script's
process to the supervisor on the stream (its JSON form: :meth:`WholeSummary.to_wire` and
:meth:`WholeSummary.from_wire`), so a run killed mid-way still has its accounts up to the last
one. It is not saved in a record (the record keeps the analysed ``WholeRun``), so its shape can
change with the stream's two ends, which are always one version.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ._whole import WholeBlock, WholeEvent

#: What a sampled place's key is: ``(file, line, function, first line)`` for a function of the
#: user's; ``("part", name)`` for a part of the step (``("part", name, place)`` at a place of the
#: user's inside it); ``("unsampled",)``, ``("elsewhere",)`` (torch
#: or a library), or ``("in-boundary", key)`` (sampled in an epoch boundary not yet sorted out).
PlaceKey = tuple[Any, ...]


@dataclass(frozen=True)
class SampledPlace:
    """Seconds the stack samples put at one place (``gaps``: in how many stretches between two
    steps it was seen, for the slow steps' excess)."""

    key: PlaceKey
    seconds: float
    gaps: int = 0

    @property
    def in_user_code(self) -> bool:
        """A function of the user's (a key of 4), not a part of the step nor torch's code."""
        return len(self.key) == 4

    @property
    def part(self) -> str | None:
        """The part of the step (``forward``, ...) when the place is one."""
        return str(self.key[1]) if len(self.key) in (2, 3) and self.key[0] == "part" else None

    @property
    def site(self) -> PlaceKey | None:
        """Inside a part of the step, the place of the user's it was at, when one was."""
        return self.key[2] if len(self.key) == 3 and self.key[0] == "part" else None


@dataclass(frozen=True)
class TimedCost:
    """A cost the hooks time exactly, in events: evaluation passes, saves, epoch boundaries."""

    seconds: float = 0.0
    #: Events counted (passes; stretches between steps with a save; boundaries).
    count: int = 0
    #: The user's line of the first one (``file:line``), when the hooks know it.
    where: str | None = None
    #: Of ``seconds``, what the stack samples saw in the functions around it rather than timed
    #: (a checkpoint's save functions' own work around ``torch.save``).
    sampled_s: float = 0.0


@dataclass(frozen=True)
class WholeSummary:
    """The whole run's accounts, in seconds since the process started (see the module docstring).

    Every second from the process's start to ``wall_s`` is in exactly one of: ``startup_s``,
    ``steps_s``, the slow steps' ``excess``, ``evaluation``, ``checkpoint``, ``boundary``,
    ``tail_s``.
    """

    wall_s: float
    #: Until the first step ended (the exactly timed costs in it left out).
    startup_s: float = 0.0
    #: Since the last step ended (or, live, the stretch so far).
    tail_s: float = 0.0
    steps: int = 0
    #: The steps' work at their block's steady pace.
    steps_s: float = 0.0
    slow_steps: int = 0
    evaluation: TimedCost = field(default_factory=TimedCost)
    checkpoint: TimedCost = field(default_factory=TimedCost)
    boundary: TimedCost = field(default_factory=TimedCost)
    #: An evaluation pass ran with autograd on.
    eval_with_grad: bool = False
    #: Training steps ran with the model in eval mode (``model.train()`` forgotten).
    trains_in_eval_mode: bool = False
    #: Epochs of the training loader that ended.
    epochs: int = 0
    #: DataLoaders built over the training loader's dataset (more than one: built anew each
    #: epoch, its workers started with it).
    loaders_built: int = 0
    #: Where the slow steps' excess over their block's median went.
    excess: tuple[SampledPlace, ...] = ()
    #: Places the steady steps run as much as the slow ones: the step's own code.
    in_step: tuple[PlaceKey, ...] = ()
    #: The step-time series, oldest first (unrounded).
    blocks: tuple[WholeBlock, ...] = ()
    startup_places: tuple[SampledPlace, ...] = ()
    tail_places: tuple[SampledPlace, ...] = ()
    #: Evaluations, saves, boundaries and slow steps, oldest first (startup and tail not in).
    events: tuple[WholeEvent, ...] = ()
    events_dropped: int = 0
    first_step_s: float | None = None
    last_step_s: float | None = None
    sample_interval_s: float = 0.0
    #: When the process started, on the machine's monotonic clock.
    started_at_s: float | None = None

    def to_wire(self) -> dict[str, Any]:
        """Its JSON form (tuples as lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> WholeSummary:
        """Back from :meth:`to_wire`'s JSON form.

        Raises:
            ValueError: ``data`` does not have the summary's shape.
        """
        try:
            return cls(
                **{
                    **data,
                    **{name: TimedCost(**data[name]) for name in _TIMED if name in data},
                    "excess": _places(data.get("excess", ())),
                    "in_step": tuple(_key(key) for key in data.get("in_step", ())),
                    "blocks": tuple(WholeBlock(**b) for b in data.get("blocks", ())),
                    "startup_places": _places(data.get("startup_places", ())),
                    "tail_places": _places(data.get("tail_places", ())),
                    "events": tuple(WholeEvent(**e) for e in data.get("events", ())),
                }
            )
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a whole run's summary: {exc}") from None


_TIMED = ("evaluation", "checkpoint", "boundary")


def _places(entries: Any) -> tuple[SampledPlace, ...]:
    return tuple(SampledPlace(_key(e["key"]), e["seconds"], e.get("gaps", 0)) for e in entries)


def _key(value: list[Any]) -> PlaceKey:
    """A place's key from its JSON list (a key inside a key too)."""
    return tuple(_key(v) if isinstance(v, list) else v for v in value)
