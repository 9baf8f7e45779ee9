"""What a lever can change bounds what its trial may be judged (pure, torch-free).

A lever changes only some of the step's parts (:data:`~torchdoctor.record.lever_names.LEVERS`:
foreach the optimizer; amp, channels_last and compile forward and backward). Two facts follow,
whatever else runs on the machine:

- **The other parts do not move.** The parts the lever leaves alone (its *untouched* time) take
  as long in the trial's steps as in the baseline's beside them. When they moved by more than
  :data:`UNTOUCHED_MARGIN` of the step (or the trial's allowance, if larger), something other
  than the lever changed the step (load that came or went mid-trial), and the trial's figure
  says nothing about the lever.
- **The gain is capped.** Made free, the lever's parts give at most the baseline's step ÷ its
  untouched time. A speedup past that (beyond the allowance) cannot be the lever's.
- **So is the loss, for a lever that only repeats work.** Checkpointing runs the forward once
  more at worst, with bookkeeping of its own (saved-tensor hooks, the recomputed graph): the
  step cannot grow by more than :data:`REPEAT_FACTOR` times the baseline's forward (beyond the
  allowance). On ``tests/scenarios/tiny_transformer.py`` checkpointing measured 0.66x quiet,
  an added 1.4 forwards; a trial beside load came out 0.13x.

A trial outside either bound is judged :data:`~torchdoctor.record.UNCLEAR` ("could not tell"),
never "worth it" or "slower", with the bound it broke in words. A lever that may change every
part (threads, batch size) has no bound here. Runs taken side by side in pairs (``fix``'s rounds)
are bounded as they are judged: each pair's figures, then their geometric mean.

**The untouched parts gauge the load.** Load that slows a run slows the parts its lever leaves
alone with the parts it changes. So in pairs where those parts hold a large share of every run's
step (:data:`GAUGE_SHARE`; the data wait, a loader's other processes, left out and held small,
:data:`WAIT_SHARE`), how far a pair's untouched parts moved beyond how far they moved in every
pair is load its two runs saw apart, and is taken out of that pair (:func:`corrected_pairs`).
How far they moved in every pair (the pairs' median move: one pair whose runs saw load apart
would carry a geometric mean with it) cannot be told apart: the lever's own effect on them (the
fused optimizer leaves the caches to the forward and backward, a fifth quicker) or load that weighed on one side's runs more (the first run of each alternation is the
original's). So it is never credited (:func:`judge_rounds`): a gain must clear the allowance in
every pair with a common quickening of the untouched parts left out, a loss with a common
slowing left out. The figure is the corrected pairs' geometric mean: of two pairs the same as
their figure as timed; of three or more, one loaded pair no longer lifts it (as timed, a round
tripled by load on its original run made a fused optimizer's 1.89x read 2.73x). One slowed run
can then make a remedy unclear, never make it. Beside a busy-looping process the fused
optimizer's rounds as timed ranged 1.14x to 2.89x over 4 runs of ``fix``, and each run's
corrected rounds lay within 9% of each other.

**Corrected pairs are held to the ceiling by what they credit.** The ceiling bounds the gain
with the untouched parts held; a corrected judgement credits its lowest pair with their common
quickening left out (its low end), so that is what must not pass the ceiling; the common move
itself is held to :data:`UNTOUCHED_MARGIN` as before. A ceiling on the figure as timed refused
a fused optimizer beside a busy-looping process in CI (2.44x at most with its untouched parts
held; its rounds as timed came out past that and the allowance): the lever itself makes those
parts a fifth quicker, and load that weighs on one original run lifts its round. (The data
wait, which the correction leaves out, is in the ceiling: a data wait that vanished in the
patched runs is not the optimizer's doing.)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ..record import UNCLEAR, JudgedSpeedup, judged_speedup
from ..record.part_names import PART_WORDS, STEP_PARTS

#: How far, as a share of the baseline's median step, the parts a lever does not change may
#: move between its baseline and its trial before the trial is "could not tell". Quiet, they
#: move by a few percent; load that comes or goes moves them by tens of percent or more.
UNTOUCHED_MARGIN = 0.15

#: The share of every run's mean step, on both sides of every pair, that the parts a lever leaves
#: alone (the data wait aside) must hold for the pairs to be corrected by them: where they are
#: a sliver, their own noise swamps the load they gauge (amp or compile on the optimizer and
#: "other" alone).
GAUGE_SHARE = 0.3
#: The most of any run's mean step the data wait may take for the pairs to be corrected: the
#: loader's worker processes see load their own way, not as the training thread does.
WAIT_SHARE = 0.1

#: How many times the parts a lever repeats (``adds_at_most``) it may add to the step, at worst.
REPEAT_FACTOR = 2.0

Parts = Sequence[dict[str, float]]


def untouched_ms(steps: Parts, changed: Sequence[str]) -> list[float]:
    """Each step's time outside the parts ``changed``."""
    return [sum(ms for part, ms in step.items() if part not in changed) for step in steps]


def outside_bounds(
    lever: str,
    changed: Sequence[str],
    base: Parts,
    trial: Parts,
    allowance: float,
    adds: Sequence[str] = (),
    pairs: Sequence[tuple[Parts, Parts]] = (),
    credited: float | None = None,
) -> str | None:
    """Why a trial's figure cannot be the lever's (the module's docstring), or ``None``.

    ``base`` and ``trial`` are the baseline's and the trial's measured steps, each as ms by
    step part; ``changed`` the parts the lever can change; ``adds`` those it may run once more
    at worst. ``pairs`` (at least two) are the same steps as runs taken side by side, a
    baseline's and a trial's each (:func:`~torchdoctor.analysis.compare.judge`'s pairs): the
    bounds are then read pair by pair, each pair's mean step as the pair's speedup is, and taken
    across the pairs as its figure is (their geometric mean). Pooled, one loaded run weighs on
    its side alone: beside a busy-looping process a fused step measured 1.71x in pairs whose
    pooled medians came out past the optimizer's 2.29x. ``credited``: where the pairs were
    judged corrected for the load each run saw (:func:`corrected_pairs`), the gain the judgement
    credits (its low end): it, not the figure as timed, is held to the ceiling, and the untouched
    parts' move is the pairs' median, as their common move is.
    """
    runs = _runs(changed, adds, base, trial, pairs)
    base = base or [step for b, _ in pairs for step in b]
    trial = trial or [step for _, t in pairs for step in t]
    if runs is None:
        return None
    why = _slower_than_it_can(lever, adds, runs, allowance)
    if why is not None or set(STEP_PARTS) <= set(changed):
        return why
    speedup = _across(r.base_step / r.trial_step for r in runs)
    base_step = _across(r.base_step for r in runs)
    base_rest = _across(r.base_rest for r in runs)
    trial_rest = _across(r.trial_rest for r in runs)
    parts = _words(changed)
    margin = max(UNTOUCHED_MARGIN, allowance)
    if all(r.base_rest > 0 for r in runs):
        ceiling = _across(r.base_step / r.base_rest for r in runs)
        # how far the untouched parts moved, as a share of the step, taken across the pairs
        moves = [r.trial_rest / r.base_rest for r in runs]
        corrected = credited is not None
        moved = abs((_middle(moves) if corrected else _across(moves)) - 1.0) / ceiling
        limit = ceiling * (1.0 + allowance)
        can_give = (
            f"{lever} can give: it changes only {parts}, {1.0 - 1.0 / ceiling:.0%} of the step, "
            f"so at most {ceiling:.2f}x (the load changed during the trial)"
        )
        if credited is not None and credited > limit:
            return f"{credited:.2f}x, its rounds read against the load, is more than {can_give}"
        # corrected, the untouched parts' move decides; past the ceiling too, its words say it
        if speedup > limit and (not corrected or moved > margin):
            return f"{speedup:.2f}x is more than {can_give}"
    else:
        moved = abs(trial_rest - base_rest) / base_step
    if moved > margin:
        return (
            f"the load changed during the trial: {_words(_moved(changed, base, trial))}, which "
            f"{lever} does not change, took {trial_rest:.2f} ms a step in the trial against "
            f"{base_rest:.2f} ms beside it"
        )
    return None


@dataclass(frozen=True)
class _Run:
    """One run's (or one side's pooled) figures, in ms a step."""

    base_step: float
    trial_step: float
    base_rest: float
    trial_rest: float
    base_adds: float


@dataclass(frozen=True)
class Corrected:
    """Pairs of runs read against the load each run saw (:func:`corrected_pairs`)."""

    #: Each pair's speedup, its own load taken out (they agree as the lever's effect does).
    pairs: list[float]
    #: How far the untouched parts moved in every pair (trial ÷ baseline, the pairs' median):
    #: the lever's own effect on them or load on one side, never told apart.
    common: float


def corrected_pairs(
    changed: Sequence[str], pairs: Sequence[tuple[Parts, Parts]]
) -> Corrected | None:
    """Each pair's speedup with the load its two runs saw apart taken out (the module's
    docstring): its mean steps' ratio × how far its untouched parts moved (trial ÷ baseline, the
    data wait left out) ÷ how far they moved across all the pairs (their median, :func:`_middle`:
    one pair whose runs saw load apart must not move it).
    ``None`` where the pairs cannot be corrected: fewer than two, a lever that may change every
    part, or a run whose untouched parts hold less than :data:`GAUGE_SHARE` of its step or whose
    data wait more than :data:`WAIT_SHARE`."""
    gauge = [p for p in STEP_PARTS if p not in changed and p != "data_wait"]
    if len(pairs) < 2 or not gauge:
        return None
    timed, moved = [], []
    for base, trial in pairs:
        sides = []
        for steps in (base, trial):
            if not steps:
                return None
            step = statistics.fmean(sum(s.values()) for s in steps)
            rest = statistics.fmean(sum(s.get(p, 0.0) for p in gauge) for s in steps)
            wait = statistics.fmean(s.get("data_wait", 0.0) for s in steps)
            if step <= 0 or rest < GAUGE_SHARE * step or wait > WAIT_SHARE * step:
                return None
            sides.append((step, rest))
        (base_step, base_rest), (trial_step, trial_rest) = sides
        timed.append(base_step / trial_step)
        moved.append(trial_rest / base_rest)
    common = _middle(moved)
    return Corrected([t * m / common for t, m in zip(timed, moved)], common)


def judge_rounds(corrected: Corrected, allowance: float) -> JudgedSpeedup:
    """The judgement of corrected pairs (the module's docstring): their geometric mean, faster
    only when every pair clears ``allowance`` with a common quickening of the untouched parts
    left out (its low end), slower only when every pair does the other way with a common
    slowing left out (its high end)."""
    speedup = _across(corrected.pairs)
    low = min(corrected.pairs) * min(1.0, corrected.common)
    high = max(corrected.pairs) * max(1.0, corrected.common)
    return judged_speedup(
        round(speedup, 3),
        round(low, 3),
        round(high, 3),
        round(allowance, 3),
        faster=low >= 1.0 + allowance,
        slower=high <= 1.0 / (1.0 + allowance),
    )


def _runs(
    changed: Sequence[str],
    adds: Sequence[str],
    base: Parts,
    trial: Parts,
    pairs: Sequence[tuple[Parts, Parts]],
) -> list[_Run] | None:
    """The pairs' figures (their means), or the pooled steps' as one (their medians: a few
    outlier steps must not swing a trial within one run); ``None`` with nothing to compare."""
    paired = [(b, t) for b, t in pairs if b and t]
    sides, stat = (
        (paired, statistics.fmean) if len(paired) >= 2 else ([(base, trial)], statistics.median)
    )
    out = []
    for b, t in sides:
        if not b or not t:
            return None
        run = _Run(
            base_step=stat(sum(step.values()) for step in b),
            trial_step=stat(sum(step.values()) for step in t),
            base_rest=stat(untouched_ms(b, changed)),
            trial_rest=stat(untouched_ms(t, changed)),
            base_adds=stat(sum(step.get(p, 0.0) for p in adds) for step in b),
        )
        if run.base_step <= 0 or run.trial_step <= 0:
            return None
        out.append(run)
    return out


def _across(values: Iterable[float]) -> float:
    """The geometric mean: how the pairs' speedups are taken across them."""
    logs = [math.log(v) if v > 0 else -math.inf for v in values]
    return math.exp(statistics.fmean(logs)) if logs and -math.inf not in logs else 0.0


def _middle(ratios: Sequence[float]) -> float:
    """The median of ratios, an even count's two middle ones taken by their geometric mean (of
    two pairs, a move of 2.5 in one and of 0.4 in the other is no move: 1.0, not 1.45)."""
    logs = sorted(math.log(r) for r in ratios)
    half = len(logs) // 2
    return math.exp(logs[half] if len(logs) % 2 else (logs[half - 1] + logs[half]) / 2)


def _slower_than_it_can(
    lever: str, adds: Sequence[str], runs: list[_Run], allowance: float
) -> str | None:
    if not adds:
        return None
    speedup = _across(r.base_step / r.trial_step for r in runs)
    floor = _across(r.base_step / (r.base_step + REPEAT_FACTOR * r.base_adds) for r in runs)
    if speedup >= floor / (1.0 + allowance):
        return None
    added = REPEAT_FACTOR * _across(r.base_adds for r in runs)
    return (
        f"{speedup:.2f}x is slower than {lever} can make the step: it runs "
        f"{_words(adds)} again, adding at most {added:.2f} ms to a "
        f"{_across(r.base_step for r in runs):.2f} ms step, so at least {floor:.2f}x (the load "
        "changed during the trial)"
    )


def _moved(changed: Sequence[str], base: Parts, trial: Parts) -> list[str]:
    """The untouched parts that moved most: each holding a quarter or more of their move."""
    move = {
        p: abs(statistics.median(s.get(p, 0.0) for s in trial)
               - statistics.median(s.get(p, 0.0) for s in base))
        for p in STEP_PARTS
        if p not in changed
    }  # fmt: skip
    total = sum(move.values())
    return [p for p, ms in move.items() if ms >= 0.25 * total] or list(move)


def bounded(
    judged: JudgedSpeedup | None,
    lever: str,
    changed: Sequence[str],
    base: Parts,
    trial: Parts,
    adds: Sequence[str] = (),
    pairs: Sequence[tuple[Parts, Parts]] = (),
) -> JudgedSpeedup | None:
    """``judged``, or the same figure judged :data:`~torchdoctor.record.UNCLEAR` with why when it
    is outside the lever's bounds (:func:`outside_bounds`); a figure judged on pairs corrected
    for load (its ``as_timed`` set) is bounded by what it credits (its low end)."""
    if judged is None:
        return None
    credited = judged.low if judged.as_timed is not None else None
    why = outside_bounds(
        lever, changed, base, trial, judged.allowance or 0.0, adds, pairs, credited=credited
    )
    if why is None:
        return judged
    return replace(judged, judgement=UNCLEAR, why=why)


def _words(parts: Sequence[str]) -> str:
    names = [PART_WORDS.get(p, p) for p in parts]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
