"""Each remedy measured on the patched code: the numerics check, then alternated timed runs,
judged as ``compare`` judges.

**Numerics** (rewrites whose gain cannot show on a CPU, :mod:`._syncs`): the original and each
rewrite run once, seeded, and the losses of their first :data:`LOSS_STEPS` backward calls must
agree; a rewrite that changes them, or fails, is dropped.

**Speed**: variants are the original script, each timed remedy's patch alone (when there are
several, or beside kept rewrites) and the whole patch. Each round runs every variant once, in
turn; the next round runs them in the reverse order (ABBA), so a drift of the machine's load falls
on both sides. Each variant's steps from every round are pooled and judged against the
original's by :func:`torchdoctor.analysis.compare.judge` (a bootstrap interval, the run-to-run
allowance, and each round's own speedup, which must agree). A timed remedy is kept only when
``IMPROVED``. A remedy that writes a lever (the optimizer's multi-tensor step, autocast,
channels_last, compile) changes only some of the step's parts: its figure is also held to what
those parts allow (:mod:`torchdoctor.analysis.lever_bounds`), and one outside is "could not
tell" and not kept. Where the parts such a remedy leaves alone hold a large share of the step
(the optimizer's remedy), they gauge the load each run saw: its rounds are judged corrected by
them, each round as timed beside it (the same module).
"""

from __future__ import annotations

import itertools
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from .._errors import EXIT_INTERRUPTED, EXIT_OK
from ..analysis.compare import (
    IMPROVED,
    NO_CHANGE,
    REGRESSED,
    RUN_TO_RUN,
    Judgement,
    judge,
    pair_speedups,
    pair_words,
    step_times,
)
from ..analysis.firmness import others_cores
from ..analysis.lever_bounds import bounded, corrected_pairs, judge_rounds
from ..record import (
    COMPLETE,
    GONE,
    INTERRUPTED,
    STEP_PARTS,
    UNCLEAR,
    JudgedSpeedup,
    Patch,
    PatchRemedy,
    RunRecord,
)
from ..record.lever_names import LEVERS
from ._busy import busy_gain_notes, busy_patch, load_aside, paired_loads, unless_busy
from ._project import Project
from ._remedies import Remedy

#: Losses compared by the numerics check (the first backward calls of a seeded run).
LOSS_STEPS = 4
#: Steps of the numerics check the sync finder watches (the rewritten round-trips must be gone).
RECHECK_STEPS = 2
#: Losses agree within this relative tolerance (the same operations in another order).
LOSS_RTOL = 1e-5
#: A noise allowance beyond this, when it kept a patch from being judged faster, says the
#: machine was too busy for the figures to mean much.
TOO_NOISY = 0.5
#: The step parts each remedy that writes a lever can change (its lever's, by remedy key).
REMEDY_PARTS = {f.fix_remedy: f.parts for f in LEVERS.values() if f.fix_remedy is not None}


class RunVariant(Protocol):
    """Runs the script once with ``overrides`` (original path → patched file) and measures it;
    ``label`` says what runs (for the progress line); ``losses`` > 0 makes it the numerics
    check's seeded run that keeps that many loss values."""

    def __call__(self, overrides: Mapping[str, str], label: str, losses: int = 0) -> RunRecord: ...


@dataclass
class Variant:
    """One version of the script and its pooled measured steps."""

    name: str
    remedies: frozenset[str]
    overrides: Mapping[str, str]
    steps: list[float] = field(default_factory=list)
    #: Each measured run's steps by its round (:func:`alternate`'s call and round number): runs
    #: of two variants in one round were taken side by side.
    runs: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    #: The same runs' steps, each as ms by step part.
    parts: dict[tuple[int, int], list[dict[str, float]]] = field(default_factory=dict)
    #: The same runs' load: the cores other processes took while their steps ran.
    loads: dict[tuple[int, int], float | None] = field(default_factory=dict)
    #: How runs of it failed (the script raised, no step measured), in words.
    failures: list[str] = field(default_factory=list)


class Interrupted(Exception):
    """Ctrl-C or SIGTERM ended a measuring run: measuring stops, nothing is written."""


def measure_patch(
    project: Project, patch: Patch, active: Sequence[Remedy], run: RunVariant, rounds: int
) -> int:
    """Check and measure ``active`` remedies through ``run``; fill ``patch`` (each remedy's
    judgement, what is kept, the diff of what is kept); the exit status."""
    by_key = {r.key: r for r in patch.remedies}
    try:
        with tempfile.TemporaryDirectory(prefix="torchdoctor-fix-") as tmp:
            _measure(project, patch, active, run, rounds, Path(tmp), by_key)
    except (Interrupted, KeyboardInterrupt):  # in a run, or between two (SIGTERM, Ctrl-C)
        patch.diff = ""
        patch.notes.append("interrupted while measuring the patch: nothing was written")
        return EXIT_INTERRUPTED
    return EXIT_OK


def _measure(
    project: Project,
    patch: Patch,
    active: Sequence[Remedy],
    run: RunVariant,
    rounds: int,
    folder: Path,
    by_key: dict[str, PatchRemedy],
) -> None:
    numeric = [r for r in active if r.numerics]
    timed = [r for r in active if not r.numerics]
    if numeric:
        _check_numerics(project, folder, numeric, by_key, run)
    kept_numeric = frozenset(r.key for r in numeric if by_key[r.key].kept)
    whole_keys = frozenset(r.key for r in timed) | kept_numeric
    if not whole_keys:
        return
    original = Variant("original", frozenset(), {})
    variants = [original]
    alone: dict[str, Variant] = {}
    if len(timed) > 1 or (timed and kept_numeric):
        for r in timed:
            alone[r.key] = _variant(project, folder, f"{r.title} alone", frozenset([r.key]))
        variants += alone.values()
    variants.append(_variant(project, folder, "whole patch", whole_keys))
    measured = {v.remedies: v for v in variants}
    alternate(variants, run, rounds)
    patch.rounds = rounds
    for r in timed:
        _judge_remedy(by_key[r.key], original, alone.get(r.key) or measured[whole_keys])
    kept_timed = frozenset(r.key for r in timed if by_key[r.key].kept)

    def measure(kept: frozenset[str]) -> Variant:
        if kept not in measured:  # what is kept was not among the variants: measure it
            measured[kept] = _variant(project, folder, "kept remedies", kept)
            alternate([original, measured[kept]], run, rounds)
        return measured[kept]

    kept = kept_timed | kept_numeric
    if kept and measure(kept).failures and kept_numeric and kept_timed:
        # remedies that each run fail together: the timed ones alone, if they run and pay
        failure = measured[kept].failures[0]
        alone_ok = not measure(kept_timed).failures
        for k in kept_numeric if alone_ok else ():
            by_key[k].kept = False
            by_key[k].reason = f"with the other remedies the patched script failed ({failure})"
        kept = kept_timed if alone_ok else kept
    if kept and measure(kept).failures:
        failure = measured[kept].failures[0]
        for k in kept:
            by_key[k].kept = False
            by_key[k].reason = f"the whole patch failed when run ({failure})"
        patch.notes.append(f"the whole patch failed when run ({failure}): nothing was written")
        kept = frozenset()
    verdict = judged(original, measure(kept), _parts_of(kept)) if kept else None
    if verdict is not None and verdict.kind != IMPROVED and len(kept_timed) > 1:
        # together they do not pay: the best single timed remedy is the patch
        best = max(kept_timed, key=lambda k: _speedup(by_key[k]))
        for k in kept_timed - {best}:
            by_key[k].kept = False
            by_key[k].reason = "together with the others it measured no faster"
        kept = frozenset([best]) | kept_numeric
        verdict = judged(original, measure(kept), _parts_of(kept))
    if verdict is not None and verdict.kind == REGRESSED and kept_numeric and kept_timed:
        # with the rewrites the patch is slower here: the timed remedies alone, if they pay
        alone_verdict = judged(original, measure(kept_timed), _parts_of(kept_timed))
        if alone_verdict is not None and alone_verdict.kind == IMPROVED:
            loads = paired_loads(original.loads, measured[kept].loads)
            for k in kept_numeric:
                by_key[k].kept = False
                by_key[k].reason = "with it the patch measured slower" + load_aside(loads)
            kept, verdict = kept_timed, alone_verdict
    judged_steps = measured[kept].steps if verdict is not None else []
    slower, why = verdict is not None and verdict.kind == REGRESSED, ""
    if verdict is not None:  # judged on a busy machine (._busy)
        loads = paired_loads(original.loads, measured[kept].loads)
        verdict = replace(verdict, judged=busy_patch(verdict.judged, kept, loads, kept_numeric))
        why = verdict.judged.why
        patch.notes.extend(busy_gain_notes(kept, loads) if verdict.kind == IMPROVED else [])
    if verdict is not None and slower:  # on a busy machine the rewrites stay, on their losses
        said = "could not be told faster on a busy machine" if why else "measured slower"
        dropped = kept - kept_numeric if why else kept
        for k in dropped:
            by_key[k].kept = False
            by_key[k].reason = f"the whole patch {said}"
        kept -= dropped
        written = "the rewrites were written, on their losses" if kept else "nothing was written"
        patch.notes.append(f"the whole patch {said} ({verdict.judged.speedup:.2f}x): {written}")
    allowance = (verdict.judged.allowance or 0.0) if verdict is not None else 0.0
    if verdict is not None and verdict.kind != IMPROVED and allowance > TOO_NOISY and not why:
        patch.notes.append(
            f"the runs were too noisy to judge speed (runs of one variant differ by "
            f"{allowance:.0%}): close other work and run `torchdoctor fix` again"
        )
    if verdict is not None:
        patch.judged = verdict.judged
        patch.notes.extend(verdict.notes)
        patch.before_ms = round(sum(original.steps) / len(original.steps), 3)
        patch.after_ms = round(sum(judged_steps) / len(judged_steps), 3)
    if kept and kept <= kept_numeric:  # the rewrites alone, whatever was dropped
        patch.notes.append(
            "the rewrites remove host round-trips: their gain appears on an accelerator, not on "
            "this device; they are kept because the patched script computes the same losses"
        )
    patch.diff = project.diff(kept)


def _check_numerics(
    project: Project,
    folder: Path,
    numeric: Sequence[Remedy],
    by_key: dict[str, PatchRemedy],
    run: RunVariant,
) -> None:
    """Each rewrite kept only when its seeded run computes the original's losses: all of them
    together first (one run); each alone only when together they do not."""
    base = _seeded(run, {}, "original")
    if not base.losses:
        for r in numeric:
            by_key[
                r.key
            ].reason = "the original computed no loss to compare with (no backward call)"
        return
    groups = [numeric] if len(numeric) > 1 else []
    groups += [[r] for r in numeric]
    for group in groups:
        if all(by_key[r.key].kept for r in group):
            continue  # already checked together
        keys = frozenset(r.key for r in group)
        title = "the rewrites together" if len(group) > 1 else group[0].title
        record = _seeded(run, _variant(project, folder, title, keys).overrides, title)
        same = record.status == COMPLETE and _same(base.losses, record.losses)
        if same:
            for r in group:
                remedy = by_key[r.key]
                remedy.kept = True
                remedy.checked_losses = len(base.losses)
                remedy.rechecked = rechecked(r, base, record, project)
        elif len(group) == 1:
            by_key[group[0].key].reason = (
                f"the patched script failed ({_failure(record)})"
                if record.status != COMPLETE
                else f"the patched script computes other losses ({_losses(record.losses)} "
                f"against {_losses(base.losses)})"
            )


def rechecked(remedy: Remedy, base: RunRecord, patched: RunRecord, project: Project) -> str:
    """What the sync finder says of a rewrite on the patched script: :data:`GONE`, ``still
    found at FILE:LINE`` (a finding of its kind in its file that the original's run did not
    have elsewhere), or "" where the runs' watch could not tell (none watched a step, or the
    original's did not find it either)."""
    if remedy.finding is None or not base.sync_sampled_steps or not patched.sync_sampled_steps:
        return ""
    kind, file, line = remedy.finding
    same_file = [f for f in base.findings if f.kind == kind and f.file == file]
    if not any(f.line == line for f in same_file):
        return ""
    others = {f.source for f in same_file if f.line != line}
    left = [
        f for f in patched.findings if f.kind == kind and f.file == file and f.source not in others
    ]
    if not left:
        return GONE
    where = f"{project.rel(Path(file))}:{left[0].line}"
    return f"still finds {kind} at {where} ({left[0].source})"


def _seeded(run: RunVariant, overrides: Mapping[str, str], title: str) -> RunRecord:
    record = run(overrides, f"numerics check · {title}", LOSS_STEPS)
    if record.status == INTERRUPTED:
        raise Interrupted
    return record


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=LOSS_RTOL, abs_tol=1e-9) for x, y in zip(a, b)
    )


def _losses(values: list[float]) -> str:
    return ", ".join(f"{v:.6g}" for v in values) or "none"


#: Numbers :func:`alternate`'s calls, so rounds of two calls are not taken for one pair.
_alternations = itertools.count()


def alternate(variants: Sequence[Variant], run: RunVariant, rounds: int) -> None:
    """Run every variant ``rounds`` times, alternating (raises :class:`Interrupted`)."""
    call = next(_alternations)
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for v in order:
            record = run(v.overrides, f"round {r + 1}/{rounds} · {v.name}")
            if record.status == INTERRUPTED:
                raise Interrupted
            steps = step_times(record)
            if record.status != COMPLETE or len(steps) < 2:
                v.failures.append(_failure(record))
            else:
                v.steps.extend(steps)
                v.runs[(call, r)] = steps
                v.parts[(call, r)] = _step_parts(record)
                v.loads[(call, r)] = others_cores(record)


def _step_parts(record: RunRecord) -> list[dict[str, float]]:
    """Each measured step of ``record`` as ms by step part."""
    columns = {p: record.steps.part(p) for p in STEP_PARTS}
    return [
        {p: columns[p][i] if i < len(columns[p]) else 0.0 for p in STEP_PARTS}
        for i in range(len(record.steps.step_ms))
    ]


def _failure(record: RunRecord) -> str:
    note = next((n for n in record.notes if n), "")
    what = f"ended {record.status}" if record.status != COMPLETE else "measured no step"
    return f"{what}: {note}" if note else what


def judged(
    original: Variant, variant: Variant, changed: Sequence[str] | None = None
) -> Judgement | None:
    """``variant`` against ``original``, or ``None`` when either has too few steps. ``changed``:
    the only step parts ``variant`` can change (its levers'), whose untouched parts may then
    correct each round's pair for the load its runs saw (:func:`corrected_pairs`)."""
    if len(original.steps) < 2 or len(variant.steps) < 2 or variant.failures:
        return None
    # the rounds alternate the variants (ABBA): every round's own speedup must show a change
    rounds = [r for r in original.runs if r in variant.runs]
    pairs = pair_speedups([original.runs[r] for r in rounds], [variant.runs[r] for r in rounds])
    verdict = judge(original.steps, variant.steps, pairs=pairs)
    if changed is None or len(pairs) != len(rounds):
        return verdict
    corrected = corrected_pairs(changed, [(original.parts[r], variant.parts[r]) for r in rounds])
    if corrected is None:
        return verdict
    allowance = verdict.judged.allowance or RUN_TO_RUN
    judged = judge_rounds(corrected, allowance)
    notes = []
    low, high = judged.interval or (1.0, 1.0)
    if judged.judgement == NO_CHANGE and (high >= 1.0 + allowance or low <= 1 / (1 + allowance)):
        notes.append(
            f"read against the load each run saw, its rounds lie between {low:.2f}x and "
            f"{high:.2f}x: the parts it leaves alone moved alike in every round, by it or by "
            "load that weighed on one side; run it again at a quieter moment"
        )
    pairs = [round(x, 3) for x in corrected.pairs]
    return Judgement(replace(judged, as_timed=verdict.pairs), notes, pairs)


def _parts_of(remedies: frozenset[str]) -> tuple[str, ...] | None:
    """The step parts a set of remedies can change (their levers'), or ``None`` when one of them
    is not a lever's (a loader's remedy, a rewrite: any part may move)."""
    if not remedies or any(k not in REMEDY_PARTS for k in remedies):
        return None
    return tuple(p for p in STEP_PARTS if any(p in REMEDY_PARTS[k] for k in remedies))


def _judge_remedy(remedy: PatchRemedy, original: Variant, variant: Variant) -> None:
    if variant.failures:
        remedy.reason = f"the patched script failed ({variant.failures[0]})"
        return
    verdict = judged(original, variant, REMEDY_PARTS.get(remedy.key))
    if verdict is None:
        remedy.reason = "too few steps were measured to judge it"
        return
    result = _bounded(remedy, original, variant, verdict.judged)
    result = remedy.judged = unless_busy(
        result, [remedy.key], paired_loads(original.loads, variant.loads)
    )
    remedy.kept = result.judgement == IMPROVED
    measured = f"measured {result.figure('–', '()')}"
    if result.as_timed:
        measured += f", {result.as_timed_words()}"
    allowance = result.allowance or 0.0
    if result.judgement == UNCLEAR:
        remedy.reason = f"{measured}: {result.word}: {result.why}"
    elif result.judgement == REGRESSED:
        remedy.reason = f"{measured}: {result.word}"
    elif not remedy.kept and result.as_timed:
        remedy.reason = (
            f"{measured}: not faster by more than {allowance:.0%} in every round read against "
            "the load each run saw"
        )
    elif not remedy.kept and verdict.pairs:
        remedy.reason = (
            f"{measured}: not faster by more than {allowance:.0%} in every round (each "
            f"round's own: {pair_words(verdict.pairs)})"
        )
    elif not remedy.kept:
        remedy.reason = (
            f"{measured}: not faster beyond the {allowance:.0%} two runs of one script may "
            "differ by"
        )


def _bounded(remedy: PatchRemedy, original: Variant, variant: Variant, judged: JudgedSpeedup):
    """``judged``, held to what the parts of the remedy's lever allow (the module's docstring),
    pair by pair as it was judged; only the rounds both variants ran are compared."""
    changed = REMEDY_PARTS.get(remedy.key)
    if changed is None:
        return judged
    pairs = [(original.parts[r], variant.parts[r]) for r in original.parts if r in variant.parts]
    base = [step for b, _ in pairs for step in b]
    trial = [step for _, t in pairs for step in t]
    return bounded(judged, remedy.title, changed, base, trial, pairs=pairs)


def _speedup(remedy: PatchRemedy) -> float:
    return remedy.judged.speedup if remedy.judged is not None else 0.0


def _variant(project: Project, folder: Path, name: str, remedies: frozenset[str]) -> Variant:
    """The patched files of ``remedies`` written under ``folder``; the variant that runs them."""
    where = folder / "-".join(sorted(remedies))
    overrides = {}
    for path, data in project.patched(remedies).items():
        copy = where / project.rel(path)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(data)
        overrides[str(path)] = str(copy)
    return Variant(name, remedies, overrides)
