"""A whole run's accounts (``run --whole``) as the record's kinds, each with its place and fix.

Pure: takes the summary the capture keeps (:class:`~torchdoctor.record.WholeSummary`, also what
the stream carries) and the run's loader settings, and gives :class:`~torchdoctor.record.WholeRun`
and the findings about the run's course (drift, memory). A cost the hooks time in events
(evaluation, checkpoint, epoch boundary) is one :class:`TimedRule` of :data:`TIMED_RULES`: its
words and when it has a fix. docs/whole-run.md explains each kind and how it is measured.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..record import (
    Finding,
    LoaderSettings,
    PlaceKey,
    RunRecord,
    SampledPlace,
    TimedCost,
    WholeBlock,
    WholeEvent,
    WholeKind,
    WholeKindName,
    WholeRun,
    WholeSummary,
)
from ..record.part_names import PART_WORDS
from .whole_course import course_findings, eval_mode_finding, mark_cut

#: Added to a sampled place's function name when the time was spent importing modules from it.
IMPORTING = ", importing modules"
#: A place of the user's is named on its own when it held at least this share of the wall time
#: (the rest is summed as one entry); at most this many.
PLACE_SHARE = 0.005
MAX_PLACES = 6
#: A cost is given its fix when it takes at least this share of the run.
FIX_SHARE = 0.02
#: The first step's parts in the startup's words, where a part's own would mislead.
FIRST_STEP_WORDS = {"data_wait": "wait for its first batch (a DataLoader's workers starting)"}


def attach_whole(
    record: RunRecord, summary: WholeSummary, cut: bool, wall_s: float | None = None
) -> None:
    """Put a whole run's accounts into ``record`` (``whole_run`` and its findings)."""
    record.whole_run, findings = whole_run_of(summary, record.loader, cut=cut, wall_s=wall_s)
    record.findings.extend(findings)


def whole_run_of(
    summary: WholeSummary,
    loader: LoaderSettings | None = None,
    cut: bool = False,
    wall_s: float | None = None,
) -> tuple[WholeRun, list[Finding]]:
    """The record's whole run from the capture's summary.

    ``cut``: the run ended before the script did (the bound, a signal, a kill); ``wall_s``: the
    run's length as the supervisor measured it, when it outlived the last summary (the time since
    counts as tail).
    """
    s = summary
    wall = max(s.wall_s, wall_s or 0.0)
    tail = s.tail_s + (wall - s.wall_s)
    between, slow, slow_parts, slow_where = _excess(s.excess, wall, s.in_step)
    kinds = [
        _startup(s, wall),
        WholeKind("steps", s.steps_s, max(s.steps - 1, 0), detail=_steps_detail(s)),
        WholeKind(
            "slow-steps",
            slow,
            s.slow_steps,
            detail=slow_parts,
            fix=_slow_fix(slow, wall, slow_where),
        ),
        *(rule.kind_of(s, loader, wall) for rule in TIMED_RULES),
        *between,
        WholeKind("tail", max(tail, 0.0), detail=_places_words(s.tail_places, 3)),
    ]
    kinds = [_rounded(k) for k in kinds if k.seconds > 0 or k.kind in ("startup", "steps")]
    blocks = [
        WholeBlock(round(b.end_s, 3), int(b.steps), round(b.step_ms, 4), b.rss_mb, b.free_mb)
        for b in s.blocks
    ]
    run = WholeRun(
        wall_s=round(wall, 4),
        goodput=round(s.steps_s / wall, 4) if wall > 0 else 0.0,
        steps=s.steps,
        steady_step_ms=_steady(blocks),
        categories=kinds,
        series=blocks,
        epochs=s.epochs,
        sample_interval_s=s.sample_interval_s,
        events=_events(s, wall),
        events_dropped=s.events_dropped,
        started_at_s=s.started_at_s,
    )
    if cut:
        mark_cut(run)
    findings = course_findings(blocks)
    if s.trains_in_eval_mode:
        findings.append(eval_mode_finding(short_where(s.evaluation.where)))
    return run, findings


def _events(summary: WholeSummary, wall: float) -> list[WholeEvent]:
    """The run's events, startup first and tail last."""
    first, last = summary.first_step_s, summary.last_step_s
    events = [WholeEvent("startup", 0.0, round(first if first is not None else wall, 4))]
    events += [WholeEvent(e.kind, round(e.start_s, 4), round(e.seconds, 4)) for e in summary.events]
    if last is not None and wall > last:
        events.append(WholeEvent("tail", round(last, 4), round(wall - last, 4)))
    return events


def _rounded(kind: WholeKind) -> WholeKind:
    kind.seconds = round(kind.seconds, 4)
    if kind.saves_s is not None:
        kind.saves_s = round(kind.saves_s, 3)
    return kind


def _steady(blocks: list[WholeBlock]) -> float | None:
    """The run's steady step: the median of the blocks' medians, the first (settling) left out
    when there are others."""
    medians = [b.step_ms for b in (blocks[1:] if len(blocks) > 1 else blocks)]
    return round(statistics.median(medians), 4) if medians else None


def _steps_detail(summary: WholeSummary) -> str:
    counted = summary.steps - 1  # the first step ends the startup
    if counted < 1:
        return "no training step after the first (which ends the startup)"
    each = summary.steps_s / counted * 1e3
    # the mean of every step (slow ones too): the header's steady step is the median's
    return (
        f"{counted} step{'s' if counted > 1 else ''} after the first, {each:.1f} ms each on average"
    )


# --- places ------------------------------------------------------------------------------------


def place_words(key: PlaceKey) -> str:
    """``train.py:12 (index_dataset)`` for a sampled place of the user's."""
    file, line, function = str(key[0]), key[1], key[2]
    name = "" if function == "<module>" else f" ({function})"
    return f"{_short(file)}:{line}{name}"


def short_where(where: str | None) -> str | None:
    """``file:line`` with the file relative to the current folder when it is under it."""
    if not where:
        return None
    file, _, line = where.rpartition(":")
    return f"{_short(file)}:{line}" if file else where


def _short(file: str) -> str:
    try:
        rel = os.path.relpath(file)
    except ValueError:
        return file
    return rel if not rel.startswith("..") else file


def _grouped(places: Iterable[SampledPlace]) -> list[SampledPlace]:
    """Sampled places of the user's summed by function (module-level code by line), each named
    at its busiest line, its gaps the most of any line; biggest first. Other places are skipped."""
    groups: dict[tuple, list[SampledPlace]] = {}
    for place in places:
        if not place.in_user_code:
            continue
        file, line, function, first = place.key
        group = (file, line) if function == "<module>" else (file, function, first)
        groups.setdefault(group, []).append(place)
    out = [
        SampledPlace(
            max(lines, key=lambda p: p.seconds).key,
            sum(p.seconds for p in lines),
            max(p.gaps for p in lines),
        )
        for lines in groups.values()
    ]
    return sorted(out, key=lambda p: p.seconds, reverse=True)


def _places_words(places: Iterable[SampledPlace], limit: int) -> str:
    top = [p for p in _grouped(places) if p.seconds >= 0.05][:limit]
    return "; ".join(f"{place_words(p.key)} {p.seconds:.2f} s" for p in top)


# --- the kinds ---------------------------------------------------------------------------------


def _startup(summary: WholeSummary, wall: float) -> WholeKind:
    seconds = summary.startup_s
    places = _grouped(summary.startup_places)
    sampled = sum(p.seconds for p in summary.startup_places)
    kind = WholeKind("startup", seconds, 1 if summary.steps else 0)
    parts = [f"{place_words(p.key)} {p.seconds:.2f} s" for p in places[:3] if p.seconds >= 0.05]
    first: dict[str, float] = {}  # the first step's parts, each in its words
    for place in summary.startup_places:
        if place.part is not None:
            first[place.part] = first.get(place.part, 0.0) + place.seconds
    for part, part_s in sorted(first.items(), key=lambda kv: kv[1], reverse=True):
        if part_s >= 0.05:
            words = FIRST_STEP_WORDS.get(part, PART_WORDS.get(part, part))
            parts.append(f"the first step's {words} {part_s:.2f} s")
    before = seconds - sampled
    if before >= 0.05:
        parts.append(f"before the script's first line (Python, torch's import) {before:.2f} s")
    kind.detail = "; ".join(parts)
    if places:
        top = places[0]
        kind.where = place_words(top.key)
        # the modules' own start: not the script's to cache
        importing = str(top.key[2]).endswith(IMPORTING)
        share = top.seconds
        if not importing and share >= 0.5 and share >= 0.2 * seconds and share >= FIX_SHARE * wall:
            kind.fix = (
                f"{kind.where} takes {share:.1f} s of every start: compute it once and "
                "load the result (a cached index or dataset file), or do it lazily"
            )
            kind.saves_s = share
    return kind


def _excess(
    excess: tuple[SampledPlace, ...], wall: float, in_step: tuple[PlaceKey, ...]
) -> tuple[list[WholeKind], float, str, tuple[str, str] | None]:
    """The slow steps' excess: the user's functions it went to (between steps, biggest first),
    and the rest (slow steps) with the parts of the step it was in, in words. A place the steady
    steps run as much (``in_step``: the loss, the script's own step function) is the step's own
    code: its share is a slow step's."""
    total = sum(p.seconds for p in excess)
    steady = set(in_step)
    own = [p for p in excess if p.key in steady]
    places = _grouped(p for p in excess if p.key not in steady)
    named = [p for p in places if p.seconds >= PLACE_SHARE * wall][:MAX_PLACES]
    between = [_between(p, wall) for p in named]
    rest_user = sum(p.seconds for p in places) - sum(k.seconds for k in between)
    if rest_user > 0:
        between.append(
            WholeKind(
                "between-steps",
                rest_user,
                detail=f"{len(places) - len(named)} other place(s) of the script, each under "
                f"{PLACE_SHARE:.1%} of the run",
            )
        )
    slow = max(total - sum(k.seconds for k in between), 0.0)
    # (what it was, the user's line in it or ""): seconds
    parts: dict[tuple[str, str], float] = {}
    for place in excess:
        if place.part is not None:  # at the user's line inside it, when the samples saw one
            site = place.site
            label = (PART_WORDS.get(place.part, place.part), place_words(site) if site else "")
        elif len(place.key) == 1:
            label = ("not sampled" if place.key[0] == "unsampled" else "torch or a library", "")
        else:
            continue
        parts[label] = parts.get(label, 0.0) + place.seconds
    for place in _grouped(own):
        label = ("the step's own code", place_words(place.key))
        parts[label] = parts.get(label, 0.0) + place.seconds
    words = ", ".join(
        f"{name} at {line} {seconds:.2f} s" if line else f"{name} {seconds:.2f} s"
        for (name, line), seconds in sorted(parts.items(), key=lambda kv: kv[1], reverse=True)
        if seconds >= 0.01
    )
    top, top_s = max(parts.items(), key=lambda kv: kv[1], default=(("", ""), 0.0))
    where = top if top[1] and top_s * 2 >= slow > 0 else None
    said = f"their excess over the steady step went to: {words}" if words else ""
    return between, slow, said, where


def _between(place: SampledPlace, wall: float) -> WholeKind:
    """A function of the user's that a slow step's excess went to: work between steps."""
    where = place_words(place.key)
    fixable = place.seconds >= FIX_SHARE * wall
    return WholeKind(
        "between-steps",
        place.seconds,
        place.gaps,
        where=where,
        fix=f"{where} runs between steps on the training thread: do it every N steps, or hand "
        "it to a background thread"
        if fixable
        else None,
        saves_s=place.seconds if fixable else None,
    )


def _slow_fix(slow: float, wall: float, where: tuple[str, str] | None = None) -> str | None:
    """What to look for in slow steps; ``where``: the part and the user's line that most of
    their excess went to, when one did (a stall inside the model's ``forward``)."""
    if slow < FIX_SHARE * wall:
        return None
    if where is not None:
        part, line = where
        return (
            f"most of the slow steps' excess was in {part} at {line}: what "
            "that line waits on now and then (a file read, a lock, a device sync, a cache "
            "refilled every N calls)"
        )
    return (
        "steps beyond 1.5x the steady step: look for recompiles (TORCH_LOGS=recompiles), "
        "garbage collection (gc.freeze() after the model is built) and allocator stalls"
    )


# --- the costs timed in events: one rule each ----------------------------------------------------

#: A timed cost's fix: the words, and the seconds it would save (None: not told).
Fix = tuple[str, float | None]


@dataclass(frozen=True)
class TimedRule:
    """How one exactly timed cost of the summary becomes a kind: its account, its events'
    names (``pass``/``passes``), and its fix, when the account calls for one."""

    kind: WholeKindName
    account: Callable[[WholeSummary], TimedCost]
    one: str
    many: str
    fix: Callable[[WholeSummary, LoaderSettings | None, float], Fix | None]
    #: Where in the user's code, when not the account's own line (an epoch boundary's loader).
    where: Callable[[WholeSummary, LoaderSettings | None], str | None] | None = None
    #: Words after the count (``(0.20 s of it in the save functions ...)``).
    more: Callable[[TimedCost], str] | None = None

    def kind_of(
        self, summary: WholeSummary, loader: LoaderSettings | None, wall: float
    ) -> WholeKind:
        cost = self.account(summary)
        where = self.where(summary, loader) if self.where else short_where(cost.where)
        kind = WholeKind(self.kind, cost.seconds, cost.count, where=where)
        if not cost.count:
            return kind
        each = cost.seconds / cost.count
        kind.detail = (
            f"{cost.count} {self.one if cost.count == 1 else self.many}, {each:.2f} s each"
        )
        kind.detail += self.more(cost) if self.more else ""
        fix = self.fix(summary, loader, wall)
        if fix is not None:
            kind.fix, kind.saves_s = fix
        return kind


def _boundary_fix(summary: WholeSummary, loader: LoaderSettings | None, wall: float) -> Fix | None:
    seconds = summary.boundary.seconds
    if loader is None or not loader.num_workers or seconds < FIX_SHARE * wall:
        return None
    if summary.loaders_built > 1:  # persistent workers die with their loader
        where = f" at {short_where(loader.created_at)}" if loader.created_at else ""
        return (
            f"the DataLoader{where} is built anew every epoch ({summary.loaders_built} times, "
            "over the same Dataset): build it once, before the epoch loop, with "
            f"persistent_workers=True, and its {loader.num_workers} workers start once",
            seconds,
        )
    if loader.persistent_workers:
        return None
    return (
        f"DataLoader(..., persistent_workers=True): its {loader.num_workers} workers are "
        "started again at every epoch",
        seconds,
    )


def _evaluation_fix(
    summary: WholeSummary, loader: LoaderSettings | None, wall: float
) -> Fix | None:
    if summary.eval_with_grad:
        return (
            "the evaluation runs with autograd on (model.eval() does not turn it off): wrap it "
            "in `with torch.inference_mode():`",
            None,
        )
    if summary.evaluation.seconds >= FIX_SHARE * wall:
        return (
            "evaluate less often, or with a larger batch (no activations are kept for backward "
            "under torch.inference_mode())",
            None,
        )
    return None


def _checkpoint_fix(
    summary: WholeSummary, loader: LoaderSettings | None, wall: float
) -> Fix | None:
    seconds = summary.checkpoint.seconds
    if seconds < FIX_SHARE * wall:
        return None
    return (
        "save less often, or without stopping training: "
        "torch.distributed.checkpoint.async_save (state copied, written in the background)",
        seconds,
    )


def _save_functions(cost: TimedCost) -> str:
    if cost.sampled_s < 0.01:
        return ""
    return f" ({cost.sampled_s:.2f} s of it in the save functions around torch.save)"


def _loader_line(summary: WholeSummary, loader: LoaderSettings | None) -> str | None:
    return short_where(loader.created_at) if loader is not None else None


#: The costs timed in events, in the order the kinds are shown.
TIMED_RULES: tuple[TimedRule, ...] = (
    TimedRule(
        "epoch-boundary",
        lambda s: s.boundary,
        "boundary",
        "boundaries",
        _boundary_fix,
        where=_loader_line,
    ),
    TimedRule("evaluation", lambda s: s.evaluation, "pass", "passes", _evaluation_fix),
    TimedRule(
        "checkpoint", lambda s: s.checkpoint, "save", "saves", _checkpoint_fix, more=_save_functions
    ),
)
