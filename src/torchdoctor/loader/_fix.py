"""The ``--fix`` trial: inject the advised DataLoader settings into a re-run and measure it.

:func:`fix_trial` turns a record's loader findings into DataLoader arguments
(:func:`fix_settings`) and a main-process thread count (:func:`fix_threads`), re-runs the script
with them injected (no code edited) through a callable the runner gives, and compares the mean
steps: a throughput ratio, checked against what the worker sweep predicted
(:func:`predicted_speedup`). The result is the record's ``fix``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..analysis.compare import NO_CHANGE, judge, pair_speedups
from ..record import Finding, FixTrial, RunRecord
from ._rules import counted_batches, valid_loader_kwargs, warm_batches

#: ``rerun(overrides, steps, warmup, threads)``: the script run again with ``overrides`` injected
#: into its DataLoaders and, unless ``threads`` is ``None``, ``torch.set_num_threads(threads)`` at
#: its start, ``warmup`` steps then ``steps`` measured, without the loader doctor; its record.
Rerun = Callable[[dict[str, Any], int, int, "int | None"], RunRecord]

#: The re-run measures at least this many rounds of ``num_workers`` steps (a mean over few
#: rounds is dominated by where in a round it starts).
RERUN_ROUNDS = 4
#: Pairs of re-runs (the script as it is, then fixed) ``--fix`` always measures, ...
FIX_ROUNDS = 2
#: ... and at most, while the judgement is unclear and the bound leaves time.
MAX_FIX_ROUNDS = 4


#: The DataLoader arguments each loader finding sets, for ``--fix`` runs.
_FIX_ARGUMENTS = {
    "loader.num_workers": "num_workers",
    "loader.pin_memory": "pin_memory",
    "loader.persistent_workers": "persistent_workers",
    "loader.prefetch_factor": "prefetch_factor",
}


def fix_settings(findings: Iterable[Finding]) -> dict[str, Any]:
    """The DataLoader arguments to inject in a ``--fix`` run, from :func:`~torchdoctor.loader.sweep_advice`
    findings.

    Consistent as a whole: with ``num_workers=0`` the worker-only arguments are reset (the
    DataLoader rejects them), otherwise unchanged ones are left out.
    """
    out: dict[str, Any] = {}
    for f in findings:
        name = _FIX_ARGUMENTS.get(f.kind)
        if name is not None and "recommended" in f.detail:
            out[name] = f.detail["recommended"]
    if out.get("num_workers") == 0:
        out = valid_loader_kwargs(out)
    return out


def fix_threads(findings: Iterable[Finding]) -> int | None:
    """The main-process thread count to set in a ``--fix`` run (``torch.set_num_threads``), when
    the sweep's pick changes it (a ``loader.num_workers`` finding's ``threads``, or a
    ``loader.num_threads`` finding)."""
    for f in findings:
        if f.kind == "loader.num_workers" and f.detail.get("threads"):
            return int(f.detail["threads"])
        if f.kind == "loader.num_threads" and f.detail.get("recommended"):
            return int(f.detail["recommended"])
    return None


def fix_code(settings: Mapping[str, Any], threads: int | None = None) -> str:
    """The permanent code change for injected settings: ``DataLoader(..., num_workers=4, ...)``,
    and ``torch.set_num_threads(k)`` on a line of its own when ``threads`` is given."""
    order = ["num_workers", "pin_memory", "persistent_workers", "prefetch_factor"]
    names = [n for n in order if n in settings] + [n for n in settings if n not in order]
    args = ", ".join(f"{n}={settings[n]!r}" for n in names)
    lines = [f"DataLoader(..., {args})"] if args else []
    if threads is not None:
        lines.append(f"torch.set_num_threads({threads})")
    return "\n".join(lines)


def predicted_step_ms(
    model_alone_step_ms: float,
    loader_batches_per_s: float,
    num_workers: int,
    batches_per_step: float = 1.0,
) -> float:
    """Step time predicted from the model-alone step and a loader-alone throughput.

    Without workers the batch is made in the training process, between steps: the times add.
    With workers it is made in parallel: the slower of the two bounds the step. (On a CPU
    model the workers also take cores from it, which this does not see: measure whole steps.)
    """
    if loader_batches_per_s <= 0:
        return math.inf
    loading_ms = 1000.0 * batches_per_step / loader_batches_per_s
    if num_workers == 0:
        return model_alone_step_ms + loading_ms
    return max(model_alone_step_ms, loading_ms)


def predicted_speedup(record: RunRecord) -> float | None:
    """What the worker sweep predicts for the whole step, capped by the measured ceiling."""
    finding = next(
        (f for f in record.findings if f.kind in ("loader.num_workers", "loader.num_threads")),
        None,
    )
    if finding is None or not finding.detail.get("predicted_speedup"):
        return None
    predicted = float(finding.detail["predicted_speedup"])
    if finding.detail.get("measures") != "step" and record.ceiling_speedup:
        predicted = min(predicted, record.ceiling_speedup)  # a faster loader cannot beat the model
    return round(predicted, 3)


def rerun_window(
    workers: int, steps: int, warmup: int, settings: Mapping[str, Any]
) -> tuple[int, int]:
    """``(steps, warmup)`` of a re-run with ``workers`` loader workers: whole rounds of workers,
    at least :data:`RERUN_ROUNDS` of them and ``steps``, after the batches the workers prefetch
    when they start (with ``settings``' ``prefetch_factor``) and at least ``warmup``."""
    return (
        counted_batches(workers, max(steps, RERUN_ROUNDS * workers)),
        max(warmup, warm_batches(workers, settings.get("prefetch_factor"))),
    )


def fix_trial(
    record: RunRecord,
    rerun: Rerun,
    *,
    steps: int,
    warmup: int,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FixTrial:
    """Re-run the script as it is and with the advised DataLoader settings (and threads)
    injected, alternately, and judge the fix as ``compare`` judges a change.

    Each re-run measures whole rounds of ``num_workers`` steps (with workers, batches arrive
    several at once, then a wait) after skipping the batches the workers prefetch when they
    start (:func:`~torchdoctor.loader.counted_batches`,
    :func:`~torchdoctor.loader.warm_batches`), and at least the first run's ``steps`` and
    ``warmup``; the original's re-runs measure the same window. :data:`FIX_ROUNDS` pairs run
    (original, then fixed), and up to :data:`MAX_FIX_ROUNDS` while the judgement is unclear and
    another pair fits in ``budget_s``. The speedup pools every step of each side; its 90%
    bootstrap interval and each pair's own speedup
    (:func:`~torchdoctor.analysis.compare.judge`: every pair must agree beyond 10%) decide
    IMPROVED, NO CHANGE ("no clear gain") or REGRESSED.
    Nothing is re-run when no finding sets a DataLoader argument or the thread count.

    Args:
        record: the first run's record, with its loader findings.
        rerun: runs the script again (see :data:`Rerun`).
        steps: measured steps of the first run.
        warmup: warmup steps of the first run.
        budget_s: seconds the extra rounds may take (``None``: no extra rounds).
        clock: the time, for the budget (a fake in tests).

    Returns:
        The trial (also what the caller stores as ``record.fix``).
    """
    overrides = fix_settings(record.findings)
    threads = fix_threads(record.findings)
    trial = FixTrial(
        overrides=overrides,
        predicted_speedup=predicted_speedup(record),
        where=record.loader.created_at if record.loader else None,
        code=fix_code(overrides, threads) or None,
        threads=threads,
    )
    if not overrides and threads is None:
        return trial
    workers = overrides.get("num_workers", record.loader.num_workers if record.loader else 0) or 0
    window = rerun_window(workers, steps, warmup, overrides)
    befores: list[RunRecord] = []
    afters: list[RunRecord] = []
    started = clock()
    while len(afters) < MAX_FIX_ROUNDS:
        if len(afters) >= FIX_ROUNDS:
            pair_s = (clock() - started) / len(afters)
            verified = trial.verified
            unclear = verified is not None and verified.judgement == NO_CHANGE
            if not unclear or budget_s is None or clock() - started + pair_s > budget_s:
                break
        befores.append(rerun({}, *window, None))
        afters.append(rerun(overrides, *window, threads))
        trial.after = afters[-1]
        if not _judged(trial, befores, afters):
            break
    return trial


def _judged(trial: FixTrial, befores: list[RunRecord], afters: list[RunRecord]) -> bool:
    """Judge the pairs so far into ``trial``; False when a run measured no step."""
    before = [ms for r in befores for ms in _steps(r)]
    after = [ms for r in afters for ms in _steps(r)]
    if not all(_steps(r) for r in befores + afters):
        trial.verified = trial.after_step_ms = None
        trial.pairs = []
        return False
    judgement = judge(
        before,
        after,
        pairs=pair_speedups([_steps(r) for r in befores], [_steps(r) for r in afters]),
    )
    trial.verified = judgement.judged
    trial.pairs = judgement.pairs
    trial.rounds = len(afters)
    trial.before_step_ms = round(statistics.fmean(before), 4)
    trial.after_step_ms = round(statistics.fmean(after), 4)
    return True


def _steps(record: RunRecord) -> list[float]:
    """A re-run's step times: each measured step, or its mean where only that is known."""
    if record.steps.step_ms:
        return list(record.steps.step_ms)
    return [record.step_ms.mean] if record.step_ms is not None and record.step_ms.mean > 0 else []


__all__ = [
    "FIX_ROUNDS",
    "MAX_FIX_ROUNDS",
    "RERUN_ROUNDS",
    "Rerun",
    "fix_code",
    "fix_settings",
    "fix_threads",
    "fix_trial",
    "predicted_speedup",
    "predicted_step_ms",
    "rerun_window",
]
