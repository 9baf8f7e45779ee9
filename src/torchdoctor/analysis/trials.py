"""Trials and FLOPs into the record: speedups with their spread, utilisation, the Next line (pure).

A trial's **speedup** is the baseline's median step ÷ the trial's median step (for
``batch-size``, samples/s at the picked size ÷ samples/s as the script runs, from median steps).
The baseline is the script as it runs, measured right before each lever and right after it.
Its **spread** is a 90% bootstrap interval of that ratio, resampling both series' steps. Medians:
one or two outlier steps (a burst of load, a recompile) cannot swing them; steps over
:data:`OUTLIER_FACTOR` times their series' median are counted in the trial's ``detail``.

A trial is **worth it** when the interval's low end is above 1 *and* the speedup clears the
allowance: the larger of ``compare``'s run-to-run allowance and how far apart the baseline's
blocks before and after the lever are (a burst of load in one of them). **Slower** is the same
the other way; anything else is **no clear gain**, and only a trial worth it has a pick. A figure
outside what the lever's parts allow is **could not tell** (:mod:`.lever_bounds`). The
speedup, its interval, the allowance and the judgement are the trial's ``judged``
(:class:`~torchdoctor.record.JudgedSpeedup`: the rule and the words every judgement shares).
"""

from __future__ import annotations

import statistics
from typing import Any

from ..record import (
    IMPROVED,
    Flops,
    JudgedSpeedup,
    RunRecord,
    Stat,
    Trial,
    TrialPoint,
    judged_speedup,
)
from ..record.lever_names import LEVERS
from .compare import RUN_TO_RUN, median_spread
from .compare import interval as ratio_interval
from .lever_bounds import bounded

#: Bootstrap resamples of a speedup's interval (seeded: the same steps give the same interval).
BOOTSTRAP_ROUNDS = 1000
#: Uncounted ops taking together this share of the FLOP step's op time make the count partial
#: (a recurrent kernel does whatever its time: an LSTM's matmuls, 88% of a small language
#: model's arithmetic, took 8 to 16% of its step's op time, the rest being small ops' overhead).
UNCOUNTED_SHARE = 0.10
#: A step this many times its series' median is an outlier (reported, and outvoted by medians).
OUTLIER_FACTOR = 3.0
#: Dense peak FLOP/s of known accelerators by dtype, from their makers' data sheets.
PEAKS: dict[tuple[str, str], float] = {
    ("H100", "bfloat16"): 989e12,
    ("H100", "float16"): 989e12,
    ("H100", "float32"): 67e12,
    ("H200", "bfloat16"): 989e12,
    ("H200", "float16"): 989e12,
    ("H200", "float32"): 67e12,
    ("A100", "bfloat16"): 312e12,
    ("A100", "float16"): 312e12,
    ("A100", "float32"): 19.5e12,
    ("L4", "bfloat16"): 121e12,
    ("L4", "float16"): 121e12,
    ("L4", "float32"): 30.3e12,
    ("V100", "float16"): 125e12,
    ("V100", "float32"): 15.7e12,
    ("T4", "float16"): 65e12,
    ("T4", "float32"): 8.1e12,
}


def interval(base: list[float], trial: list[float], seed: int = 0) -> list[float]:
    """90% bootstrap interval of ``median(base) / median(trial)``, rounded; ``[]`` with under 2
    steps on a side."""
    if len(base) < 2 or len(trial) < 2:
        return []
    lo, hi = ratio_interval(
        base, trial, seed=seed, rounds=BOOTSTRAP_ROUNDS, statistic=statistics.median
    )
    return [round(lo, 3), round(hi, 3)]


def samples_per_s(run: Any) -> float:
    """Samples per second of a batch-size setting's run (its batch size is its setting), from
    its median step."""
    if not run.steps_ms:
        return 0.0
    median = statistics.median(run.steps_ms)
    per_step = statistics.fmean(run.batches) if run.batches else 1.0
    return int(run.setting or 1) * per_step * 1000.0 / median if median > 0 else 0.0


def outliers(steps: list[float]) -> int:
    """Steps over :data:`OUTLIER_FACTOR` times the series' median."""
    if len(steps) < 3:
        return 0
    median = statistics.median(steps)
    return sum(1 for x in steps if x > OUTLIER_FACTOR * median)


def trials_of(record: RunRecord, runs: list[Any]) -> list[Trial]:
    """The record's trials from the phase's runs (``capture.phases.trials.TrialRun``), each
    with the texts its lever gave while it was live (``run.texts``)."""
    baseline = [r for r in runs if r.lever.name == "baseline" and r.steps_ms]
    record.trial_baseline = [round(x, 4) for r in baseline for x in r.steps_ms]
    batch = record.loader.batch_size if record.loader is not None else None
    batches = [b for r in baseline for b in r.batches] or record.steps.batches
    per_step = statistics.fmean(batches) if batches else 1.0
    out: list[Trial] = []
    by_name: dict[str, list[Any]] = {}
    neighbours: dict[str, list[Any]] = {}
    for i, run in enumerate(runs):
        name = run.lever.name
        if name == "baseline":
            continue
        by_name.setdefault(name, []).append(run)
        if name not in neighbours and run.steps_ms:
            neighbours[name] = _around(runs, i)
    for name, group in by_name.items():
        around = neighbours.get(name) or []
        blocks = [list(r.steps_ms) for r in around] or [list(record.steps.step_ms)]
        base = [x for block in blocks for x in block]
        base_parts = [p for r in around for p in r.parts_ms]
        allowance = max(RUN_TO_RUN, median_spread(blocks))
        texts = group[-1].texts
        measured = [r for r in group if r.steps_ms]
        if not measured:
            reason = next((r.skipped for r in group if r.skipped), "no step was measured")
            out.append(Trial(name=name, changed=texts.get("changed", name), status="skipped",
                             reason=reason or ""))  # fmt: skip
            continue
        if name == "batch-size" and batch:
            trial = _batch_trial(name, measured, base, batch, per_step, texts, allowance)
            _judged(trial, base, measured)
            out.append(trial)
            continue
        best = min(measured, key=lambda r: statistics.median(r.steps_ms))
        t = best.texts
        trial = Trial(
            name=name,
            changed=t.get("changed", name),
            status="failed" if t.get("error") else "measured",
            reason=t.get("error") or "",
            steps=[round(x, 4) for x in best.steps_ms],
            step_ms=Stat.of(best.steps_ms),
            warmup_ms=[round(x, 4) for x in best.warmup_ms],
            judged=bounded(
                _judged_speedup(
                    _ratio(base, best.steps_ms), interval(base, best.steps_ms), allowance
                ),
                name,
                LEVERS[name].parts if name in LEVERS else (),
                base_parts,
                best.parts_ms,
                LEVERS[name].adds_at_most if name in LEVERS else (),
            ),
            pick=best.setting or None,
            code=t.get("code", ""),
            caveats=list(t.get("caveats", [])),
        )
        if t.get("graph_breaks"):
            trial.detail["graph_breaks"] = t["graph_breaks"]
        trial.detail.update(t.get("detail") or {})
        if len(measured) > 1:
            trial.points = [
                TrialPoint(setting=r.setting, step_ms=Stat.of(r.steps_ms), memory_mb=r.memory_mb)
                for r in measured
            ]
        _judged(trial, base, [best])
        out.append(trial)
    out.sort(key=lambda t: -(t.judged.speedup if t.judged is not None else 0.0))
    return out


def flops_of(record: RunRecord, counted: dict[str, Any] | None, device_name: str) -> Flops | None:
    """The step's FLOPs, achieved FLOP/s and utilisation against the table's or a measured peak."""
    if not counted or not counted.get("per_step"):
        return None
    dtype = counted.get("dtype", "float32")
    flops = Flops(per_step=counted["per_step"], params=counted.get("params"), dtype=dtype)
    flops.uncounted = list(counted.get("uncounted") or [])
    flops.partial = bool(flops.uncounted) and (
        any(u.get("share") is None or u.get("recurrent") for u in flops.uncounted)
        or sum(u["share"] for u in flops.uncounted) >= UNCOUNTED_SHARE
    )
    if record.step_ms is not None and record.step_ms.mean > 0:
        flops.achieved_flops_per_s = flops.per_step / (record.step_ms.mean / 1000.0)
    known = next(
        (v for (name, dt), v in PEAKS.items() if name in device_name and dt == dtype), None
    )
    if known is not None:
        flops.peak_flops_per_s = known
        flops.peak_source = f"table: {device_name} {dtype} dense peak"
    elif counted.get("measured_peak"):
        flops.peak_flops_per_s = counted["measured_peak"]["flops_per_s"]
        flops.peak_source = counted["measured_peak"]["source"]
    if flops.achieved_flops_per_s and flops.peak_flops_per_s:
        # four significant figures, not four decimals: a small model's share of the peak on a
        # busy CPU is under 0.005% and read 0.0 (tests/integration/test_trials.py's MLP)
        flops.utilisation = float(f"{flops.achieved_flops_per_s / flops.peak_flops_per_s:.4g}")
    return flops


def next_with_trials(record: RunRecord) -> str | None:
    """The trials in the verdict's Next, best first (before a compute- or host-bound run's
    advice, after an input-bound run's); None when none was asked for."""
    if not record.trials:
        return None
    measured = [t for t in record.trials if t.status == "measured" and t.judged is not None]
    if not measured:
        return "no trial could be measured here (see the trials table)"
    parts = [f"{t.name} {t.judged.figure()} ({t.judged.word}{_freed(t)})" for t in measured]
    return "measured trials, best first: " + ", ".join(parts)


def _freed(trial: Trial) -> str:
    """``; frees 84% of the activations held for backward`` for a trial that counted them."""
    before = trial.detail.get("activations_before")
    # held at once: what stays saved, and a block rebuilt in the backward
    after = trial.detail.get("held_at_most", trial.detail.get("activations_after"))
    if not before or after is None or after >= before:
        return ""  # nothing freed (a block that held its input only): no words of it
    return f"; frees {1 - after / before:.0%} of the activations held for backward"


def _around(runs: list[Any], i: int) -> list[Any]:
    """The baseline runs taken right before and right after the lever whose first run is
    ``i``."""
    before = next((r for r in reversed(runs[:i]) if r.lever.name == "baseline"), None)
    after = next((r for r in runs[i:] if r.lever.name == "baseline"), None)
    return [r for r in (before, after) if r is not None and r.steps_ms]


def _judged_speedup(
    speedup: float | None, spread: list[float], allowance: float
) -> JudgedSpeedup | None:
    """The speedup and its interval judged against the allowance (``worth it`` when IMPROVED:
    the interval is above 1 and the speedup clears the allowance); ``None`` without a speedup."""
    if speedup is None:
        return None
    low, high = spread if len(spread) == 2 else (None, None)
    return judged_speedup(speedup, low, high, round(allowance, 3))


def _judged(trial: Trial, base: list[float], runs: list[Any]) -> None:
    """Record the outliers; a trial not worth it has no pick."""
    spikes = outliers(base) + sum(outliers(r.steps_ms) for r in runs)
    if spikes:
        trial.detail["outlier_steps"] = spikes
    if trial.judged is None or trial.judged.judgement != IMPROVED:
        trial.pick = None


def _ratio(base: list[float], trial: list[float]) -> float | None:
    if not base or not trial or statistics.median(trial) <= 0:
        return None
    return round(statistics.median(base) / statistics.median(trial), 3)


def _batch_trial(
    name: str,
    runs: list[Any],
    base: list[float],
    batch: int,
    per_step: float,
    texts: dict[str, Any],
    allowance: float,
) -> Trial:
    base_rate = batch * per_step * 1000.0 / statistics.median(base) if base else 0.0
    points = []
    for r in runs:
        rate = samples_per_s(r)
        points.append(
            TrialPoint(
                setting=r.setting,
                step_ms=Stat.of(r.steps_ms),
                samples_per_s=round(rate, 2),
                memory_mb=r.memory_mb,
            )
        )
    best_i = max(range(len(points)), key=lambda i: points[i].samples_per_s or 0.0)
    best, run = points[best_i], runs[best_i]
    # The samples/s ratio's spread: the step-time ratio's, scaled by the batch ratio.
    scale = int(run.setting) * statistics.fmean(run.batches) / (batch * per_step)
    spread = [round(x * scale, 3) for x in interval(base, run.steps_ms)]
    speedup = round((best.samples_per_s or 0.0) / base_rate, 3) if base_rate else None
    return Trial(
        name=name,
        changed=f"DataLoader(batch_size={run.setting}) (from {batch})",
        steps=[round(x, 4) for x in run.steps_ms],
        step_ms=Stat.of(run.steps_ms),
        warmup_ms=[round(x, 4) for x in run.warmup_ms],
        judged=_judged_speedup(speedup, spread, allowance),
        pick=run.setting,
        points=points,
        code=f"DataLoader(..., batch_size={run.setting})  # and scale the learning rate",
        caveats=list(texts.get("caveats", [])),
        detail={"baseline_samples_per_s": round(base_rate, 2)},
    )
