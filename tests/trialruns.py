"""What ``analysis.trials.trials_of`` reads of the trials phase's runs, as plain test doubles
(``capture.phases.trials.TrialRun`` without torch): a lever by its name, and one setting's run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Lever:
    name: str


@dataclass
class Run:
    lever: Lever
    setting: str = ""
    steps_ms: list[float] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    parts_ms: list[dict[str, float]] = field(default_factory=list)
    warmup_ms: list[float] = field(default_factory=list)
    memory_mb: float | None = None
    skipped: str | None = None
    texts: dict[str, Any] = field(default_factory=dict)


#: The script as it runs, measured before and after each lever.
BASE = Lever("baseline")
