"""Two records, one judgement: did B get faster than A, beyond the noise? (pure; docs/report.md)

The **speedup** is A's mean step ÷ B's (samples/s of B ÷ samples/s of A when their batch sizes
differ). Its **interval** is a 90% bootstrap of that ratio from the two runs' per-step times.
That interval only knows the noise *within* each run; two runs of the same script on a busy
machine differ by more (10% is ordinary on the 2-core test machine, 12% was seen in CI). The
**allowance** for that is the larger of :data:`RUN_TO_RUN` and how far apart each run's own
blocks of steps are (:func:`block_spread`, by their medians: a burst of load that moves one
run's mean moves one of its blocks too; one preempted step does not). A change counts only
when the interval clears 1 **and** the speedup clears the allowance either way:

- ``IMPROVED``: interval above 1 and speedup ≥ 1 + allowance;
- ``REGRESSED``: interval below 1 and speedup ≤ 1 / (1 + allowance);
- ``NO CHANGE`` otherwise

(:func:`torchdoctor.record.judged_speedup`, the rule every judged speedup follows).

``UNCLEAR`` (could not tell) instead, when the two runs' steps were measured beside loads
that differ by :data:`~torchdoctor.analysis.firmness.BUSY_CORES` or more and the load's
direction explains the judgement (:func:`~torchdoctor.analysis.firmness.load_doubt`).

``analyze`` records compare the same way, from their first rank's per-step wall times.

**What is compared** comes first: when the two records differ in script, arguments, device,
world size, batch size or kind (a run against an ``analyze`` of a trace), ``differences`` says
so, and for a different script, device or kind the judgement is not a like-for-like one
(``like_for_like`` is false: the report leads with that warning). Records whose step times are
impossible (not finite, zero or negative, or longer than a day) are refused.
"""

from __future__ import annotations

import math
import os
import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..record import (
    IMPROVED,
    NO_CHANGE,
    REGRESSED,
    STEP_PARTS,
    UNCLEAR,
    JudgedSpeedup,
    JudgementWord,
    RunRecord,
    judged_speedup,
)
from .firmness import load_doubt, others_cores, wait_doubt

#: Run-to-run change that a single pair of runs cannot tell from noise, at the least.
RUN_TO_RUN = 0.10
#: Consecutive blocks each run's steps are cut into for :func:`block_spread`.
BLOCKS = 3
#: Bootstrap resamples (seeded: the same records always give the same interval).
ROUNDS = 2000
#: A step longer than a day is no measurement.
MAX_STEP_MS = 86_400_000.0


@dataclass
class PartChange:
    part: str
    a_ms: float
    b_ms: float

    @property
    def change_ms(self) -> float:
        return self.b_ms - self.a_ms


@dataclass
class WholeChange:
    """Two whole runs (``run --whole``): judged by their wall time, with each kind's seconds.

    One wall time per run has no interval: the change must clear :data:`RUN_TO_RUN` alone; a
    run that was cut short is not judged (its wall time is the cut's, not the run's).
    """

    kind: str
    #: A's wall time ÷ B's.
    speedup: float
    a_wall_s: float
    b_wall_s: float
    a_goodput: float
    b_goodput: float
    #: ``[kind, A seconds, B seconds]`` for every kind either run has, in the record's order.
    kinds: list[list[Any]] = field(default_factory=list)
    note: str = ""


@dataclass
class Comparison:
    """What ``torchdoctor compare`` found; ``to_dict`` is its ``--json``."""

    #: B against A: the speedup, its interval, the allowance two runs of one script may differ
    #: by here (see the module's docstring), and the judgement.
    judged: JudgedSpeedup
    #: ``"mean step"`` or ``"samples/s"`` (batch sizes differ).
    measure: str
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
    #: How the two records differ besides the change being judged (script, device, ...).
    differences: list[str] = field(default_factory=list)
    #: False when they differ in script, device or kind: the speedup is no like-for-like change.
    like_for_like: bool = True
    #: Both records are whole runs: their wall times and kinds.
    whole: WholeChange | None = None

    @property
    def kind(self) -> JudgementWord:
        """The judgement: ``IMPROVED``, ``NO CHANGE`` or ``REGRESSED``."""
        return self.judged.judgement

    def to_dict(self) -> dict[str, Any]:
        """The ``--json``: the judgement's ``kind``, ``speedup``, ``interval`` and ``allowance``
        at the top level (docs/report.md), then the rest."""
        out = asdict(self)
        judged = out.pop("judged")
        return {
            "kind": judged["judgement"],
            "speedup": judged["speedup"],
            "interval": [judged["low"], judged["high"]],
            "allowance": judged["allowance"],
            **out,
        }


def impossible_steps(steps: list[float]) -> str:
    """What is impossible about a record's step times (not finite, zero or negative, longer than
    a day), in words; ``""`` when nothing is. ``compare`` and ``report`` refuse such records."""
    bad = [x for x in steps if not (math.isfinite(x) and 0.0 < x <= MAX_STEP_MS)]
    if not bad:
        return ""
    return (
        f"impossible step times ({bad[0]!r} ms among {len(bad)} of {len(steps)}): it is "
        "damaged or was not written by torchdoctor"
    )


class CompareError(ValueError):
    """The two records cannot be compared (no steps)."""


def compare(a: RunRecord, b: RunRecord) -> Comparison:
    """Judge B against A (see the module's docstring)."""
    a_steps, b_steps = step_times(a), step_times(b)
    for name, steps in (("A", a_steps), ("B", b_steps)):
        if len(steps) < 2:
            raise CompareError(f"record {name} has {len(steps)} measured step(s); 2 are needed")
        bad = impossible_steps(steps)
        if bad:
            raise CompareError(f"record {name} has {bad}")
    differences, like = _differences(a, b)
    scale, measure, notes = _scale(a, b)
    verdict = judge(a_steps, b_steps, scale)
    notes.extend(verdict.notes)
    judged = verdict.judged
    allowance = judged.allowance if judged.allowance is not None else RUN_TO_RUN
    why = load_doubt(judged.judgement, others_cores(a), others_cores(b)) or wait_doubt(
        judged.judgement, a, b, scale, allowance
    )
    if why:
        judged = replace(judged, judgement=UNCLEAR, why=why)
        notes.append(why)
    return Comparison(
        judged=judged,
        measure=measure,
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
        differences=differences,
        like_for_like=like,
        whole=whole_change(a, b),
    )


def whole_change(a: RunRecord, b: RunRecord) -> WholeChange | None:
    """Two whole runs side by side (``None`` unless both are)."""
    wa, wb = a.whole_run, b.whole_run
    if wa is None or wb is None or wa.wall_s <= 0 or wb.wall_s <= 0:
        return None
    speedup = wa.wall_s / wb.wall_s
    kind, note = NO_CHANGE, ""
    if wa.ending == "cut" or wb.ending == "cut":
        kind = "NOT JUDGED"
        note = "a run was cut short: its wall time is where it was cut; compare the goodput"
    elif speedup >= 1 + RUN_TO_RUN:
        kind = IMPROVED
    elif speedup <= 1 / (1 + RUN_TO_RUN):
        kind = REGRESSED
    doubt = load_doubt(kind, others_cores(a), others_cores(b))
    if doubt:
        kind, note = UNCLEAR, doubt
    order: dict[str, list[float]] = {}
    for side, run in ((0, wa), (1, wb)):
        for c in run.categories:
            order.setdefault(c.kind, [0.0, 0.0])[side] += c.seconds
    return WholeChange(
        kind=kind,
        speedup=round(speedup, 4),
        a_wall_s=wa.wall_s,
        b_wall_s=wb.wall_s,
        a_goodput=wa.goodput,
        b_goodput=wb.goodput,
        kinds=[[k, round(x, 4), round(y, 4)] for k, (x, y) in order.items()],
        note=note,
    )


def _differences(a: RunRecord, b: RunRecord) -> tuple[list[str], bool]:
    """What differs between the two records besides the change being judged, and whether the
    comparison is still like for like (same script, device and kind of record)."""
    out: list[str] = []
    like = True
    kind_a, kind_b = _kind(a), _kind(b)
    if kind_a != kind_b:
        out.append(f"different kinds of record: A is {kind_a}, B is {kind_b}")
        like = False
    script_a, script_b = _script(a), _script(b)
    if script_a and script_b and script_a != script_b:
        out.append(f"different scripts: A ran {script_a}, B ran {script_b}")
        like = False
    elif a.command[1:] != b.command[1:] and script_a == script_b and kind_a == kind_b == "a run":
        out.append(
            f"different arguments: A {' '.join(a.command[1:]) or '(none)'}, "
            f"B {' '.join(b.command[1:]) or '(none)'}"
        )
    dev_a = a.env.device if a.env is not None else ""
    dev_b = b.env.device if b.env is not None else ""
    if dev_a and dev_b and dev_a != dev_b:
        out.append(f"different devices: A on {dev_a}, B on {dev_b}")
        like = False
    world_a, world_b = _world(a), _world(b)
    if world_a != world_b:
        out.append(f"different world sizes: A {world_a} process(es), B {world_b}")
    batch_a = a.loader.batch_size if a.loader is not None else None
    batch_b = b.loader.batch_size if b.loader is not None else None
    if batch_a and batch_b and batch_a != batch_b:
        out.append(f"different batch sizes: A {batch_a}, B {batch_b}")
    return out, like


def _kind(record: RunRecord) -> str:
    if record.is_trace_analysis or (not record.steps.step_ms and record.trace):
        return "a trace analysis"
    return "a run"


def _script(record: RunRecord) -> str:
    """The script (or module) a run ran, as its file name; an analysis's first trace."""
    command = [c for c in record.command if c not in ("torchdoctor", "run", "loader")]
    for i, word in enumerate(command):
        if word == "-m" and i + 1 < len(command):
            return command[i + 1]
        if word.endswith(".py"):
            return os.path.basename(word)
    return ""


def _world(record: RunRecord) -> int:
    return record.distributed.world_size if record.distributed is not None else 1


@dataclass
class Judgement:
    """B's steps against A's: the judged speedup, what to read it with, and the pairs."""

    judged: JudgedSpeedup
    notes: list[str] = field(default_factory=list)
    #: Runs taken in pairs: each pair's own speedup (its ratio of mean steps).
    pairs: list[float] = field(default_factory=list)

    @property
    def kind(self) -> JudgementWord:
        """The judgement: ``IMPROVED``, ``NO CHANGE`` or ``REGRESSED``."""
        return self.judged.judgement


def judge(
    a_steps: list[float],
    b_steps: list[float],
    scale: float = 1.0,
    spread: float = 0.0,
    pairs: list[float] | None = None,
) -> Judgement:
    """Did B's steps get faster than A's, beyond the noise (see the module's docstring)?

    ``scale`` turns the ratio of mean steps into the measure compared (samples per step of B
    over A's, when the batch sizes differ); ``spread`` is how far repeated runs of one side
    were seen to differ, a floor for the allowance.

    ``pairs`` (:func:`pair_speedups`, at least two) is for steps pooled from runs taken side by
    side in pairs (A then B, B then A, ...). Load on a shared machine moves whole runs: beside a
    busy-looping process, single runs of one script came out up to 2.1x slower than the others,
    so how far one side's runs are apart says more about the machine than about the change. A
    pair's two runs share the moment instead, so the speedup is then the pairs' geometric mean
    and its range runs from the smallest pair to the largest (pooled steps mix the moments: one
    loaded run's steps weigh on the pooled mean of its side alone, and a 6x change measured in
    pairs of 6.0x and 1.6x pooled to 1.17x). The allowance is :data:`RUN_TO_RUN`, and a change
    counts only when **every** pair agrees beyond it: one run slowed by load can make the change
    unclear, not make it.
    """
    paired = [scale * x for x in pairs] if pairs is not None and len(pairs) >= 2 else []
    if paired:
        speedup = math.exp(statistics.fmean(math.log(x) for x in paired))
        lo, hi = min(paired), max(paired)
        allowance = max(RUN_TO_RUN, spread)
        faster = lo >= 1.0 + allowance
        slower = hi <= 1.0 / (1.0 + allowance)
    else:
        speedup = scale * statistics.fmean(a_steps) / statistics.fmean(b_steps)
        lo, hi = (scale * x for x in interval(a_steps, b_steps))
        allowance = max(RUN_TO_RUN, block_spread(a_steps), block_spread(b_steps), spread)
        faster = slower = True
    judgement = judged_speedup(speedup, lo, hi, allowance, faster, slower).judgement
    judged = JudgedSpeedup(
        round(speedup, 3), round(lo, 3), round(hi, 3), round(allowance, 3), judgement
    )
    notes: list[str] = []
    if paired:  # some pair saw a change, not every one
        unclear = judgement == NO_CHANGE and (hi >= 1.0 + allowance or lo <= 1 / (1 + allowance))
    else:
        unclear = judgement == NO_CHANGE and (lo > 1.0 or hi < 1.0)  # beyond the steps' noise
    if unclear and paired:
        notes.append(
            f"a pair of runs saw a change ({speedup:.2f}x overall) but the pairs disagree "
            f"({pair_words(paired)}): run it again"
        )
    elif unclear:
        notes.append(
            f"the change ({speedup:.2f}x) is beyond this pair's step-to-step noise but within "
            f"the {allowance:.0%} two runs of one script may differ by here: run each again"
        )
    return Judgement(judged, notes, [round(x, 3) for x in paired])


def step_times(record: RunRecord) -> list[float]:
    """A record's per-step times: its measured steps, or an ``analyze`` record's first rank's."""
    if record.steps.step_ms:
        return list(record.steps.step_ms)
    if record.trace is not None and record.trace.ranks:
        return [s.wall_ms for s in record.trace.ranks[0].steps]
    return []


def block_spread(steps: list[float]) -> float:
    """How far apart :data:`BLOCKS` consecutive blocks of steps are (:func:`median_spread`)."""
    size = len(steps) // BLOCKS
    if size < 2:
        return 0.0
    return median_spread([steps[i * size : (i + 1) * size] for i in range(BLOCKS)])


def pair_speedups(a_runs: list[list[float]], b_runs: list[list[float]]) -> list[float]:
    """Each pair of runs' own speedup: A's mean step ÷ B's, a ratio of throughput (with a
    loader's workers, batches arrive in rounds and a median step misses the waits: medians made
    a 4.8x fix 14x). Pairs with a run without steps are left out."""
    return [
        statistics.fmean(a) / statistics.fmean(b)
        for a, b in zip(a_runs, b_runs)
        if a and b and statistics.fmean(b) > 0
    ]


def pair_words(pairs: list[float]) -> str:
    """Each pair's speedup, for a report: ``2.61x, 1.28x, 4.34x``."""
    return ", ".join(f"{x:.2f}x" for x in pairs)


def median_spread(blocks: list[list[float]]) -> float:
    """Largest ÷ smallest median of the blocks, less 1. Medians: a burst of load that lasts
    moves a block's median, one preempted step does not (by their means, one CI run's blocks came
    out 2.4x apart: an allowance no real change could clear)."""
    medians = [statistics.median(b) for b in blocks if len(b) >= 2]
    if len(medians) < 2 or min(medians) <= 0:
        return 0.0
    return max(medians) / min(medians) - 1.0


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
    """Samples one step trains: every rank's, in a job (2 ranks of batch 16 train 32)."""
    if record.loader is None or record.loader.batch_size is None or not record.steps.batches:
        return None
    return record.loader.batch_size * statistics.fmean(record.steps.batches) * _world(record)


def _parts(a: RunRecord, b: RunRecord) -> list[PartChange]:
    out = []
    for part in STEP_PARTS:
        sa, sb = a.parts_ms.get(part), b.parts_ms.get(part)
        if sa is not None and sb is not None:
            out.append(PartChange(part, round(sa.mean, 3), round(sb.mean, 3)))
    return out
