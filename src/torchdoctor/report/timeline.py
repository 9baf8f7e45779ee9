"""``run --timeline PATH``: the steps' parts as a Chrome trace (Perfetto and chrome://tracing open it).

One process, one track (thread) per step part kind, one track for the steps and one for the
phases, with every part of every kept step as a complete event (``"ph": "X"``) at the time it
happened on this process's clock (``time.perf_counter_ns``, in µs). The steps kept are those of
the measured, model-alone and no-sync phases, so a user can set them beside a profiler trace of
the same run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

from ..record import STEP_PARTS, write_json_atomic

#: Track ids: the phases, the steps, a whole run's kinds (``run --whole``), then one per part.
_PHASES_TID, _STEPS_TID, _WHOLE_TID = 1, 2, 3
_PART_TID = {part: 10 + i for i, part in enumerate(STEP_PARTS)}


def timeline(
    phases: list[tuple[str, list[Any]]],
    pid: int | None = None,
    spans: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
    process: str = "",
    rank: int | None = None,
) -> dict[str, Any]:
    """The trace of ``(phase name, its StepMarks)`` pairs, and ``spans`` (name, start ns, end
    ns) on a track of their own: a whole run's startup, evaluations, saves, boundaries, tail.
    The process is named ``process`` (the script), with its rank in a job."""
    pid = pid if pid is not None else os.getpid()
    name = f"rank {rank}: {process}" if rank is not None else process
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name or "script"}},
        _meta(pid, _PHASES_TID, "phases"),
        _meta(pid, _STEPS_TID, "steps"),
        *(_meta(pid, tid, part.replace("_", " ")) for part, tid in _PART_TID.items()),
    ]
    if spans:
        events.append(_meta(pid, _WHOLE_TID, "whole run"))
        events += [_span(pid, _WHOLE_TID, name, a, b, "whole") for name, a, b in spans]
    for phase, steps in phases:
        marks = [m for step in steps for m in step.marks[:1] + step.marks[-1:]]
        if not marks:
            continue
        events.append(_span(pid, _PHASES_TID, phase, marks[0].host_ns, marks[-1].host_ns, "phase"))
        for i, step in enumerate(steps, 1):
            if len(step.marks) < 2:
                continue
            first, last = step.marks[0].host_ns, step.marks[-1].host_ns
            events.append(_span(pid, _STEPS_TID, f"{phase} step {i}", first, last, "step"))
            for prev, mark in zip(step.marks, step.marks[1:]):
                part = mark.label if mark.label in _PART_TID else "other"
                if mark.host_ns > prev.host_ns:
                    events.append(
                        _span(pid, _PART_TID[part], part, prev.host_ns, mark.host_ns, "part")
                    )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_timeline(
    path: str | os.PathLike[str],
    phases: list[tuple[str, list[Any]]],
    spans: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
    process: str = "",
    rank: int | None = None,
) -> Path:
    return write_json_atomic(path, timeline(phases, spans=spans, process=process, rank=rank))


def rank_timeline_path(path: str, rank: int) -> str:
    """Where a job's rank writes ``--timeline PATH``: ``NAME.rankR.json`` beside ``PATH``."""
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.rank{rank}.{ext}" if dot and "/" not in ext else f"{path}.rank{rank}"


def timeline_paths(path: str, ranks: list[int] | None) -> list[str]:
    """The files ``--timeline PATH`` wrote: PATH, or one per rank of a job."""
    return [path] if ranks is None else [rank_timeline_path(path, r) for r in ranks]


class _Mark(NamedTuple):
    label: str
    host_ns: int


class _Step(NamedTuple):
    marks: list[_Mark]


def phases_of_parts(steps: list[tuple[str, dict[str, float], int]]) -> list[tuple[str, list[Any]]]:
    """``(phase, parts_ms, start_ns)`` of each step as :func:`timeline` takes them: each step's
    parts laid end to end from its start, in the order of STEP_PARTS (a step log keeps each
    part's total, not the order of the calls within the step)."""
    phases: dict[str, list[Any]] = {}
    for phase, parts, start_ns in steps:
        marks, at = [_Mark("other", start_ns)], float(start_ns)
        for part in STEP_PARTS:
            if parts.get(part, 0.0) > 0:
                at += parts[part] * 1e6
                marks.append(_Mark(part, round(at)))
        phases.setdefault(phase, []).append(_Step(marks))
    return list(phases.items())


def _meta(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _span(pid: int, tid: int, name: str, start_ns: int, end_ns: int, cat: str) -> dict[str, Any]:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": start_ns / 1000.0,
        "dur": (end_ns - start_ns) / 1000.0,
    }
