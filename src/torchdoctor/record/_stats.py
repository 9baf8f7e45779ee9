"""The record's two plain shapes of measured durations: a series of steps by part, and the
summary of a series. Every section of the record uses them (the run, each rank, each trial), so
they sit below all of them and import nothing of the record but the parts' names. Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .part_names import STEP_PARTS


@dataclass
class Stat:
    """Summary of a series of durations in milliseconds."""

    median: float
    p90: float
    mean: float
    min: float
    max: float
    count: int

    @classmethod
    def of(cls, values: list[float]) -> Stat | None:
        """Summarise ``values``; ``None`` when there are none."""
        if not values:
            return None
        ordered = sorted(values)
        return cls(
            median=_quantile(ordered, 0.5),
            p90=_quantile(ordered, 0.9),
            mean=sum(ordered) / len(ordered),
            min=ordered[0],
            max=ordered[-1],
            count=len(ordered),
        )


def _quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list."""
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class StepSeries:
    """Per-step durations in milliseconds, one list entry per measured step."""

    step_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    to_device_ms: list[float] = field(default_factory=list)
    forward_ms: list[float] = field(default_factory=list)
    backward_ms: list[float] = field(default_factory=list)
    optimizer_ms: list[float] = field(default_factory=list)
    #: The model evaluated inside the step (eval mode, grad off); empty in records before it.
    evaluation_ms: list[float] = field(default_factory=list)
    other_ms: list[float] = field(default_factory=list)
    #: DataLoader batches drawn during each step (more than 1 with gradient accumulation).
    batches: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        # a record written before a part existed (``evaluation``) has no series for it: zeros
        if self.other_ms and not self.evaluation_ms:
            self.evaluation_ms = [0.0] * len(self.other_ms)

    def __len__(self) -> int:
        return len(self.step_ms)

    def part(self, name: str) -> list[float]:
        """The series of one step part, by its name in :data:`STEP_PARTS`."""
        return getattr(self, f"{name}_ms")

    def add_step(self, parts_ms: dict[str, float], batches: int) -> None:
        """Append one step: its parts (keyed by :data:`STEP_PARTS` names; a part not given took
        0 ms), their sum, its batches."""
        self.step_ms.append(round(sum(parts_ms.values()), 4))
        for name in STEP_PARTS:
            self.part(name).append(round(parts_ms.get(name, 0.0), 4))
        self.batches.append(batches)
