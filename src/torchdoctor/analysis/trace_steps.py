"""Where each ProfilerStep's wall time went, claimed in priority order so the parts sum to it.

Within a step window every instant is given to the first part, in :data:`STEP_PARTS` order,
that has an event running then: time the GPU computes is "gpu_kernels" even while the host
also runs Python; host time not covered by any event is "other". So the parts of a step add
up exactly to its wall time, and the first parts show what the step could not go below.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field

from ..trace import (
    CAT_CPU_OP,
    CAT_DRIVER,
    CAT_KERNEL,
    CAT_MEMCPY,
    CAT_MEMSET,
    CAT_PYTHON,
    CAT_RUNTIME,
    CAT_USER_ANNOTATION,
    RankTrace,
)
from . import _intervals
from .trace_gpu import kernel_type

#: Parts of a traced step, in claiming priority. They sum to the step's wall time.
STEP_PARTS = (
    "gpu_kernels",
    "memcpy",
    "memset",
    "communication",
    "runtime",
    "dataloader",
    "cpu_ops",
    "other",
)

_STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
#: record_function label torch.utils.data.DataLoader puts around fetching each batch
DATALOADER_PREFIX = "enumerate(DataLoader)"


@dataclass
class StepWindow:
    """One ProfilerStep on the host timeline (or the whole trace when there is none)."""

    name: str
    start_us: float
    end_us: float

    @property
    def wall_us(self) -> float:
        return self.end_us - self.start_us


@dataclass
class StepBreakdown:
    """Parts of each step in milliseconds, and their sum over the analysed steps."""

    steps: list[StepWindow]
    per_step_ms: list[dict[str, float]]
    total_ms: dict[str, float]
    wall_ms: float
    #: steps summed into ``total_ms`` (the last one is left out when there are several)
    analysed_steps: int
    notes: list[str] = field(default_factory=list)

    def share(self, part: str) -> float:
        """Share (0..1) of the analysed wall time taken by ``part``."""
        return self.total_ms.get(part, 0.0) / self.wall_ms if self.wall_ms > 0 else 0.0


def step_windows(t: RankTrace) -> tuple[list[StepWindow], list[str]]:
    """The host ProfilerStep events in time order, or one window over the whole trace.

    The reader stores a ProfilerStep as a ``user_annotation`` in every spelling (some releases
    wrote it as an operator), so that is the one host category looked at.
    """
    notes: list[str] = []
    annotation = t.cat_id(CAT_USER_ANNOTATION)
    step_ids = {i for i, n in enumerate(t.names) if _STEP_RE.match(n)}
    rows = [i for i in range(len(t)) if t.name[i] in step_ids and t.cat[i] == annotation]
    windows = [StepWindow(t.names[t.name[i]], t.ts[i], t.ts[i] + t.dur[i]) for i in rows]
    windows.sort(key=lambda w: w.start_us)
    if windows:
        return windows, notes
    if len(t) == 0:
        return [], ["the trace holds no duration events"]
    start = min(t.ts)
    end = max(t.ts[i] + t.dur[i] for i in range(len(t)))
    notes.append(
        f"{t.label}: no ProfilerStep in the trace (profile with a torch.profiler schedule and "
        "call prof.step() each iteration); the whole trace is analysed as one step"
    )
    return [StepWindow("whole trace", start, end)], notes


def _part_rows(t: RankTrace) -> dict[str, array[int]]:
    """Rows of the events that make up each part (``other`` has none: it is the remainder)."""
    cat_of = {c: t.cat_id(c) for c in t.cats}
    kernel = cat_of.get(CAT_KERNEL, -1)
    memcpy = cat_of.get(CAT_MEMCPY, -1)
    memset = cat_of.get(CAT_MEMSET, -1)
    runtime = {cat_of.get(CAT_RUNTIME, -1), cat_of.get(CAT_DRIVER, -1)} - {-1}
    cpu_op = cat_of.get(CAT_CPU_OP, -1)
    # The DataLoader's label is a user_annotation (the reader moves it there from cpu_op in
    # every spelling); a Python function of that name counts too.
    annotation = {cat_of.get(CAT_USER_ANNOTATION, -1), cat_of.get(CAT_PYTHON, -1)} - {-1}
    comm_names = {i for i, n in enumerate(t.names) if kernel_type(n) == "COMMUNICATION"}
    loader_names = {i for i, n in enumerate(t.names) if n.startswith(DATALOADER_PREFIX)}
    parts: dict[str, array[int]] = {p: array("q") for p in STEP_PARTS}
    cat, name = t.cat, t.name
    for i in range(len(t)):
        c = cat[i]
        if c == kernel:
            parts["communication" if name[i] in comm_names else "gpu_kernels"].append(i)
        elif c == memcpy:
            parts["memcpy"].append(i)
        elif c == memset:
            parts["memset"].append(i)
        elif c in runtime:
            parts["runtime"].append(i)
        elif c in annotation and name[i] in loader_names:
            parts["dataloader"].append(i)
        elif c == cpu_op:
            parts["cpu_ops"].append(i)
    return parts


def step_breakdown(t: RankTrace, include_last_step: bool = False) -> StepBreakdown:
    """Claim each step's wall time part by part (see the module docstring)."""
    windows, notes = step_windows(t)
    rows = _part_rows(t)
    # each part's rows are let go once merged
    merged = {
        p: _intervals.merge_rows(t.ts, t.dur, rows.pop(p)) for p in STEP_PARTS if p != "other"
    }
    per_step: list[dict[str, float]] = []
    for w in windows:
        claimed: list[tuple[float, float]] = []
        before = 0.0
        parts: dict[str, float] = {}
        for p in STEP_PARTS:
            if p == "other":
                parts[p] = max(0.0, w.wall_us - before) / 1000.0
                continue
            inside = _intervals.clip_spans(merged[p], w.start_us, w.end_us)
            if not inside:  # nothing of this part in the step: the claimed time is as it was
                parts[p] = 0.0
                continue
            claimed = _intervals.merge(claimed + inside)
            now = _intervals.covered(claimed)
            parts[p] = (now - before) / 1000.0
            before = now
        per_step.append(parts)
    analysed = len(windows)
    if len(windows) >= 2 and not include_last_step:
        analysed -= 1
        notes.append(
            f"{t.label}: the last ProfilerStep ({windows[-1].name}) is left out of the totals, "
            "as HTA does (it often holds the profiler's own flush)"
        )
    total = {p: sum(s[p] for s in per_step[:analysed]) for p in STEP_PARTS}
    wall = sum(w.wall_us for w in windows[:analysed]) / 1000.0
    return StepBreakdown(windows, per_step, total, wall, analysed, notes)
