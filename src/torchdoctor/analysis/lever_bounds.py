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
part (threads, batch size) has no bound here.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..record import UNCLEAR, JudgedSpeedup
from ..record.part_names import PART_WORDS, STEP_PARTS

#: How far, as a share of the baseline's median step, the parts a lever does not change may
#: move between its baseline and its trial before the trial is "could not tell". Quiet, they
#: move by a few percent; load that comes or goes moves them by tens of percent or more.
UNTOUCHED_MARGIN = 0.15

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
) -> str | None:
    """Why a trial's figure cannot be the lever's (the module's docstring), or ``None``.

    ``base`` and ``trial`` are the baseline's and the trial's measured steps, each as ms by
    step part; ``changed`` the parts the lever can change; ``adds`` those it may run once more
    at worst.
    """
    why = _slower_than_it_can(lever, adds, base, trial, allowance)
    if why is not None:
        return why
    if not base or not trial or set(STEP_PARTS) <= set(changed):
        return None
    base_step = statistics.median(sum(step.values()) for step in base)
    trial_step = statistics.median(sum(step.values()) for step in trial)
    base_rest = statistics.median(untouched_ms(base, changed))
    trial_rest = statistics.median(untouched_ms(trial, changed))
    if base_step <= 0 or trial_step <= 0:
        return None
    parts = _words(changed)
    ceiling = base_step / base_rest if base_rest > 0 else None
    if ceiling is not None and base_step / trial_step > ceiling * (1.0 + allowance):
        return (
            f"{base_step / trial_step:.2f}x is more than {lever} can give: it changes only "
            f"{parts}, {1.0 - base_rest / base_step:.0%} of the step, so at most {ceiling:.2f}x "
            "(the load changed during the trial)"
        )
    if abs(trial_rest - base_rest) > max(UNTOUCHED_MARGIN, allowance) * base_step:
        return (
            f"the load changed during the trial: {_words(_moved(changed, base, trial))}, which "
            f"{lever} does not change, took {trial_rest:.2f} ms a step in the trial against "
            f"{base_rest:.2f} ms beside it"
        )
    return None


def _slower_than_it_can(
    lever: str, adds: Sequence[str], base: Parts, trial: Parts, allowance: float
) -> str | None:
    if not adds or not base or not trial:
        return None
    base_step = statistics.median(sum(step.values()) for step in base)
    trial_step = statistics.median(sum(step.values()) for step in trial)
    added = REPEAT_FACTOR * statistics.median(sum(step.get(p, 0.0) for p in adds) for step in base)
    floor = base_step / (base_step + added) if base_step + added > 0 else 0.0
    if trial_step <= 0 or base_step / trial_step >= floor / (1.0 + allowance):
        return None
    return (
        f"{base_step / trial_step:.2f}x is slower than {lever} can make the step: it runs "
        f"{_words(adds)} again, adding at most {added:.2f} ms to a {base_step:.2f} ms step, so "
        f"at least {floor:.2f}x (the load changed during the trial)"
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
) -> JudgedSpeedup | None:
    """``judged``, or the same figure judged :data:`~torchdoctor.record.UNCLEAR` with why when it
    is outside the lever's bounds."""
    if judged is None:
        return None
    why = outside_bounds(lever, changed, base, trial, judged.allowance or 0.0, adds)
    if why is None:
        return judged
    return JudgedSpeedup(
        judged.speedup, judged.low, judged.high, judged.allowance, UNCLEAR, why=why
    )


def _words(parts: Sequence[str]) -> str:
    names = [PART_WORDS.get(p, p) for p in parts]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
