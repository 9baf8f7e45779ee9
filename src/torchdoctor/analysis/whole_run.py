"""A whole run's accounts (``run --whole``) as the record's kinds, each with its place and fix.

Pure: takes the plain summary the capture keeps (:meth:`~torchdoctor.capture._whole.WholeRunWatch.
summary`, also what the stream carries) and the run's loader settings, and gives
:class:`~torchdoctor.record.WholeRun` and the findings about the run's course (drift, memory).
docs/whole-run.md explains each kind and how it is measured.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from ..record import (
    Finding,
    LoaderSettings,
    RunRecord,
    WholeBlock,
    WholeEvent,
    WholeKind,
    WholeRun,
)
from .whole_course import course_findings, eval_mode_finding, mark_cut

#: Added to a sampled place's function name when the time was spent importing modules from it.
IMPORTING = ", importing modules"
#: A place of the user's is named on its own when it held at least this share of the wall time
#: (the rest is summed as one entry); at most this many.
PLACE_SHARE = 0.005
MAX_PLACES = 6
#: A cost is given its fix when it takes at least this share of the run.
FIX_SHARE = 0.02


def attach_whole(
    record: RunRecord, raw: dict[str, Any], cut: bool, wall_s: float | None = None
) -> None:
    """Put a whole run's accounts into ``record`` (``whole_run`` and its findings)."""
    record.whole_run, findings = whole_run_of(raw, record.loader, cut=cut, wall_s=wall_s)
    record.findings.extend(findings)


def whole_run_of(
    raw: dict[str, Any],
    loader: LoaderSettings | None = None,
    cut: bool = False,
    wall_s: float | None = None,
) -> tuple[WholeRun, list[Finding]]:
    """The record's whole run from the capture's summary.

    ``cut``: the run ended before the script did (the bound, a signal, a kill); ``wall_s``: the
    run's length as the supervisor measured it, when it outlived the last summary (the time since
    counts as tail).
    """
    wall = max(raw["wall_s"], wall_s or 0.0)
    tail = raw["tail_s"] + (wall - raw["wall_s"])
    between, slow, slow_parts = _excess(raw["excess"], wall, raw.get("in_step", []))
    kinds = [
        _startup(raw, wall),
        WholeKind("steps", raw["steps_s"], max(raw["steps"] - 1, 0), detail=_steps_detail(raw)),
        WholeKind(
            "slow-steps",
            slow,
            raw["slow_steps"],
            detail=slow_parts,
            fix=_slow_fix(slow, wall),
        ),
        _boundary(raw, loader, wall),
        _evaluation(raw, wall),
        _checkpoint(raw, wall),
        *between,
        WholeKind("tail", max(tail, 0.0), detail=_places_words(raw["tail_places"], 3)),
    ]
    kinds = [_rounded(k) for k in kinds if k.seconds > 0 or k.kind in ("startup", "steps")]
    blocks = [WholeBlock(round(b[0], 3), int(b[1]), round(b[2], 4), b[3]) for b in raw["blocks"]]
    steady = _steady(blocks)
    run = WholeRun(
        wall_s=round(wall, 4),
        goodput=round(raw["steps_s"] / wall, 4) if wall > 0 else 0.0,
        steps=raw["steps"],
        steady_step_ms=steady,
        categories=kinds,
        series=blocks,
        epochs=raw["epochs"],
        sample_interval_s=raw["sample_interval_s"],
        events=_events(raw, wall),
        events_dropped=raw.get("events_dropped", 0),
        started_at_s=raw.get("started_at_s"),
    )
    if cut:
        mark_cut(run)
    findings = course_findings(blocks)
    if raw.get("trains_in_eval_mode"):
        findings.append(eval_mode_finding(short_where(raw["eval_where"])))
    return run, findings


def _events(raw: dict[str, Any], wall: float) -> list[WholeEvent]:
    """The run's events, startup first and tail last."""
    first, last = raw.get("first_step_s"), raw.get("last_step_s")
    events = [WholeEvent("startup", 0.0, round(first if first is not None else wall, 4))]
    events += [WholeEvent(k, round(s, 4), round(d, 4)) for k, s, d in raw.get("events", [])]
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


def _steps_detail(raw: dict[str, Any]) -> str:
    counted = raw["steps"] - 1  # the first step ends the startup
    if counted < 1:
        return "no training step after the first (which ends the startup)"
    each = raw["steps_s"] / counted * 1e3
    return f"{counted} step{'s' if counted > 1 else ''} after the first, {each:.1f} ms each"


# --- places ------------------------------------------------------------------------------------


def place_words(key: list[Any]) -> str:
    """``train.py:12 (index_dataset)`` for a sampled place of the user's."""
    file, line, function = key[0], key[1], key[2]
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


def _grouped(places: list[list[Any]]) -> list[tuple[list[Any], float, int]]:
    """Sampled places of the user's (key, seconds, gaps) summed by function (module-level code
    by line), each named at its busiest line; biggest first. Keys of other kinds are skipped."""
    groups: dict[tuple, list[Any]] = {}
    for entry in places:
        key, seconds = entry[0], entry[1]
        gaps = entry[2] if len(entry) > 2 else 0
        if len(key) != 4:
            continue
        file, line, function, first = key
        group = (file, line) if function == "<module>" else (file, function, first)
        slot = groups.setdefault(group, [key, 0.0, 0, 0.0])
        slot[1] += seconds
        slot[2] = max(slot[2], gaps)
        if seconds > slot[3]:
            slot[0], slot[3] = key, seconds
    out = [(slot[0], slot[1], slot[2]) for slot in groups.values()]
    return sorted(out, key=lambda item: item[1], reverse=True)


def _places_words(places: list[list[Any]], limit: int) -> str:
    top = [p for p in _grouped(places) if p[1] >= 0.05][:limit]
    return "; ".join(f"{place_words(key)} {seconds:.2f} s" for key, seconds, _ in top)


# --- the kinds ---------------------------------------------------------------------------------


def _startup(raw: dict[str, Any], wall: float) -> WholeKind:
    seconds = raw["startup_s"]
    places = _grouped(raw["startup_places"])
    sampled = sum(s for _, s, _ in places) + sum(
        p[1] for p in raw["startup_places"] if len(p[0]) != 4
    )
    kind = WholeKind("startup", seconds, 1 if raw["steps"] else 0)
    parts = [f"{place_words(key)} {s:.2f} s" for key, s, _ in places[:3] if s >= 0.05]
    first = sum(p[1] for p in raw["startup_places"] if p[0][0] == "part")
    if first >= 0.05:
        parts.append(f"the first step's forward, backward and optimizer {first:.2f} s")
    before = seconds - sampled
    if before >= 0.05:
        parts.append(f"before the script's first line (Python, torch's import) {before:.2f} s")
    kind.detail = "; ".join(parts)
    if places:
        key, top, _ = places[0]
        kind.where = place_words(key)
        importing = key[2].endswith(IMPORTING)  # the modules' own start: not the script's to cache
        if not importing and top >= 0.5 and top >= 0.2 * seconds and top >= FIX_SHARE * wall:
            kind.fix = (
                f"{place_words(key)} takes {top:.1f} s of every start: compute it once and "
                "load the result (a cached index or dataset file), or do it lazily"
            )
            kind.saves_s = top
    return kind


def _excess(
    excess: list[list[Any]], wall: float, in_step: list[list[Any]]
) -> tuple[list[WholeKind], float, str]:
    """The slow steps' excess: the user's functions it went to (between steps, biggest first),
    and the rest (slow steps) with the parts of the step it was in, in words. A place the steady
    steps run as much (``in_step``: the loss, the script's own step function) is the step's own
    code: its share is a slow step's."""
    total = sum(entry[1] for entry in excess)
    steady = {tuple(key) for key in in_step}
    own = [entry for entry in excess if tuple(entry[0]) in steady]
    places = _grouped([entry for entry in excess if tuple(entry[0]) not in steady])
    named = [p for p in places if p[1] >= PLACE_SHARE * wall][:MAX_PLACES]
    between = [
        WholeKind(
            "between-steps",
            seconds,
            gaps,
            where=place_words(key),
            fix=(
                f"{place_words(key)} runs between steps on the training thread: do it every N "
                "steps, or hand it to a background thread"
            )
            if seconds >= FIX_SHARE * wall
            else None,
            saves_s=seconds if seconds >= FIX_SHARE * wall else None,
        )
        for key, seconds, gaps in named
    ]
    rest_user = sum(p[1] for p in places) - sum(k.seconds for k in between)
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
    parts: dict[str, float] = {}
    for entry in excess:
        key, seconds = entry[0], entry[1]
        if len(key) == 2 and key[0] == "part":
            parts[key[1]] = parts.get(key[1], 0.0) + seconds
        elif len(key) == 1:
            label = "not sampled" if key[0] == "unsampled" else "torch or a library"
            parts[label] = parts.get(label, 0.0) + seconds
    for key, seconds, _ in _grouped(own):
        label = f"the step's own code at {place_words(key)}"
        parts[label] = parts.get(label, 0.0) + seconds
    words = ", ".join(
        f"{name} {seconds:.2f} s"
        for name, seconds in sorted(parts.items(), key=lambda kv: kv[1], reverse=True)
        if seconds >= 0.01
    )
    return between, slow, f"their excess over the steady step went to: {words}" if words else ""


def _slow_fix(slow: float, wall: float) -> str | None:
    if slow < FIX_SHARE * wall:
        return None
    return (
        "steps beyond 1.5x the steady step: look for recompiles (TORCH_LOGS=recompiles), "
        "garbage collection (gc.freeze() after the model is built) and allocator stalls"
    )


def _boundary(raw: dict[str, Any], loader: LoaderSettings | None, wall: float) -> WholeKind:
    seconds, count = raw["boundary_s"], raw["boundaries"]
    kind = WholeKind("epoch-boundary", seconds, count)
    if not count:
        return kind
    kind.detail = f"{count} boundar{'y' if count == 1 else 'ies'}, {seconds / count:.2f} s each"
    if loader is not None:
        kind.where = short_where(loader.created_at)
        if loader.num_workers and not loader.persistent_workers and seconds >= FIX_SHARE * wall:
            kind.fix = (
                "DataLoader(..., persistent_workers=True): its "
                f"{loader.num_workers} workers are started again at every epoch"
            )
            kind.saves_s = seconds
    return kind


def _counted(
    name: str, seconds: float, count: int, where: str | None, one: str, many: str
) -> WholeKind:
    """A kind counted in events (passes, saves), with its seconds each in words."""
    kind = WholeKind(name, seconds, count, where=short_where(where))  # type: ignore[arg-type]
    if count:
        kind.detail = f"{count} {one if count == 1 else many}, {seconds / count:.2f} s each"
    return kind


def _evaluation(raw: dict[str, Any], wall: float) -> WholeKind:
    kind = _counted("evaluation", raw["eval_s"], raw["evals"], raw["eval_where"], "pass", "passes")
    seconds = kind.seconds
    if not kind.count:
        return kind
    if raw["eval_with_grad"]:
        kind.fix = (
            "the evaluation runs with autograd on (model.eval() does not turn it off): wrap it "
            "in `with torch.inference_mode():`"
        )
    elif seconds >= FIX_SHARE * wall:
        kind.fix = (
            "evaluate less often, or with a larger batch (no activations are kept for backward "
            "under torch.inference_mode())"
        )
    return kind


def _checkpoint(raw: dict[str, Any], wall: float) -> WholeKind:
    kind = _counted("checkpoint", raw["save_s"], raw["saves"], raw["save_where"], "save", "saves")
    seconds = kind.seconds
    if not kind.count:
        return kind
    extra = raw["save_extra_s"]
    kind.detail += (
        f" ({extra:.2f} s of it in the save functions around torch.save)" if extra >= 0.01 else ""
    )
    if seconds >= FIX_SHARE * wall:
        kind.fix = (
            "save less often, or without stopping training: "
            "torch.distributed.checkpoint.async_save (state copied, written in the background)"
        )
        kind.saves_s = seconds
    return kind
