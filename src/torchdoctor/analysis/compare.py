"""Two records, one judgement: did B get faster than A, beyond the noise? (pure; docs/report.md)

The **speedup** is A's mean step ÷ B's (samples/s of B ÷ samples/s of A when their batch sizes
differ). Its **interval** is a 90% bootstrap of that ratio from the two runs' per-step times.
That interval only knows the noise *within* each run; two runs of the same script on a busy
machine differ by more (10% is ordinary on the 2-core test machine, 12% was seen in CI). The
**allowance** for that is the larger of :data:`RUN_TO_RUN` and how far apart each run's own
blocks of steps are (:func:`block_spread`: a burst of load that moves one run's mean moves one
of its blocks too). A change counts only when the interval clears 1 **and** the speedup clears
the allowance either way:

- ``IMPROVED``: interval above 1 and speedup ≥ 1 + allowance;
- ``REGRESSED``: interval below 1 and speedup ≤ 1 / (1 + allowance);
- ``NO CHANGE`` otherwise.

``analyze`` records compare the same way, from their first rank's per-step wall times.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..record import STEP_PARTS, RunRecord

#: Run-to-run change that a single pair of runs cannot tell from noise, at the least.
RUN_TO_RUN = 0.10
#: Consecutive blocks each run's steps are cut into for :func:`block_spread`.
BLOCKS = 3
#: Bootstrap resamples (seeded: the same records always give the same interval).
ROUNDS = 2000

IMPROVED, REGRESSED, NO_CHANGE = "IMPROVED", "REGRESSED", "NO CHANGE"


@dataclass
class PartChange:
    part: str
    a_ms: float
    b_ms: float

    @property
    def change_ms(self) -> float:
        return self.b_ms - self.a_ms


@dataclass
class Comparison:
    """What ``torchdoctor compare`` found; ``to_dict`` is its ``--json``."""

    kind: str
    speedup: float
    interval: list[float]
    #: ``"mean step"`` or ``"samples/s"`` (batch sizes differ).
    measure: str
    #: The change two runs of one script may show here (see the module's docstring).
    allowance: float
    a_step_ms: float
    b_step_ms: float
    a_steps: int
    b_steps: int
    a_verdict: str = ""
    b_verdict: str = ""
    parts: list[PartChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    a_command: list[str] = field(default_factory=list)
    b_command: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class CompareError(ValueError):
    """The two records cannot be compared (no steps)."""


def compare(a: RunRecord, b: RunRecord) -> Comparison:
    """Judge B against A (see the module's docstring)."""
    a_steps, b_steps = step_times(a), step_times(b)
    for name, steps in (("A", a_steps), ("B", b_steps)):
        if len(steps) < 2:
            raise CompareError(f"record {name} has {len(steps)} measured step(s); 2 are needed")
    scale, measure, notes = _scale(a, b)
    speedup = scale * statistics.fmean(a_steps) / statistics.fmean(b_steps)
    lo, hi = (scale * x for x in interval(a_steps, b_steps))
    allowance = max(RUN_TO_RUN, block_spread(a_steps), block_spread(b_steps))
    kind = NO_CHANGE
    if lo > 1.0 and speedup >= 1.0 + allowance:
        kind = IMPROVED
    elif hi < 1.0 and speedup <= 1.0 / (1.0 + allowance):
        kind = REGRESSED
    elif lo > 1.0 or hi < 1.0:
        notes.append(
            f"the change ({speedup:.2f}x) is beyond this pair's step-to-step noise but within "
            f"the {allowance:.0%} two runs of one script may differ by here: run each again"
        )
    return Comparison(
        kind=kind,
        speedup=round(speedup, 3),
        interval=[round(lo, 3), round(hi, 3)],
        measure=measure,
        allowance=round(allowance, 3),
        a_step_ms=round(statistics.fmean(a_steps), 3),
        b_step_ms=round(statistics.fmean(b_steps), 3),
        a_steps=len(a_steps),
        b_steps=len(b_steps),
        a_verdict=a.verdict.kind if a.verdict else "",
        b_verdict=b.verdict.kind if b.verdict else "",
        parts=_parts(a, b),
        notes=notes,
        a_command=list(a.command),
        b_command=list(b.command),
    )


def step_times(record: RunRecord) -> list[float]:
    """A record's per-step times: its measured steps, or an ``analyze`` record's first rank's."""
    if record.steps.step_ms:
        return list(record.steps.step_ms)
    if record.trace is not None and record.trace.ranks:
        return [s.wall_ms for s in record.trace.ranks[0].steps]
    return []


def block_spread(steps: list[float]) -> float:
    """Largest ÷ smallest mean of :data:`BLOCKS` consecutive blocks of steps, less 1."""
    size = len(steps) // BLOCKS
    if size < 2:
        return 0.0
    means = [statistics.fmean(steps[i * size : (i + 1) * size]) for i in range(BLOCKS)]
    return max(means) / min(means) - 1.0 if min(means) > 0 else 0.0


def interval(
    a: list[float],
    b: list[float],
    seed: int = 0,
    rounds: int = ROUNDS,
    statistic: Callable[[list[float]], float] = statistics.fmean,
) -> tuple[float, float]:
    """90% bootstrap interval of ``statistic(a) / statistic(b)``: means for two runs, medians
    for ``run --try``'s trials (a few outlier steps must not swing them)."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        num = statistic(rng.choices(a, k=len(a)))
        den = statistic(rng.choices(b, k=len(b)))
        if den > 0:
            ratios.append(num / den)
    ratios.sort()
    if not ratios:
        return 1.0, 1.0
    last = len(ratios) - 1
    return ratios[int(0.05 * last)], ratios[int(0.95 * last)]


def _scale(a: RunRecord, b: RunRecord) -> tuple[float, str, list[str]]:
    """Samples per step of B over A's, when the batch sizes are known and differ."""
    sa, sb = _samples_per_step(a), _samples_per_step(b)
    if sa is None or sb is None or sa == sb:
        return 1.0, "mean step", []
    return (
        sb / sa,
        "samples/s",
        [f"batch sizes differ (A {sa:g}, B {sb:g} samples per step): compared in samples/s"],
    )


def _samples_per_step(record: RunRecord) -> float | None:
    if record.loader is None or record.loader.batch_size is None or not record.steps.batches:
        return None
    return record.loader.batch_size * statistics.fmean(record.steps.batches)


def _parts(a: RunRecord, b: RunRecord) -> list[PartChange]:
    out = []
    for part in STEP_PARTS:
        sa, sb = a.parts_ms.get(part), b.parts_ms.get(part)
        if sa is not None and sb is not None:
            out.append(PartChange(part, round(sa.mean, 3), round(sb.mean, 3)))
    return out
