"""Memory that grows step over step in the measured steps (docs/memory.md): its rate, the line
that keeps it when the kept-graph watch found one, and when it would run out at that rate. Pure,
on the record.

The memory in use is read three times (``capture._memory_course``): at the measured steps'
start, middle and end. It creeps when it grew by at least :data:`RATE_MB` MiB a step over them
*and* in each half by at least :data:`HALF_SHARE` of the whole growth: one jump (an allocator's
arena, a first evaluation's buffers) grows one half only. The process's resident memory also
grows while its allocator warms up (a plain loop here: by 24 MB over its first epoch of 16 steps,
then flat), so on the host the growth must be :data:`HOST_SHARE` of it too. A list that keeps
tensors every step is found exactly by the kept-graph watch (``capture._kept_graphs``); this
adds when the memory it fills would run out.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from ..record import Finding, MemoryCourse, RunRecord

#: Growth per measured step, in MB, below which memory is not said to creep (a process's RSS
#: moves by a few MB with no leak: the allocator's arenas, pages touched once).
RATE_MB = 1.0
#: Each half of the measured steps must hold this share of the growth.
HALF_SHARE = 0.25
#: On the host, the growth must also be this share of the process's resident memory.
HOST_SHARE = 0.10
#: A creep that would run out of memory within this many seconds is critical.
CRITICAL_S = 3600.0
_MB = 1024 * 1024
_KINDS = {"device": "the device's allocated memory", "host": "the process's resident memory"}


def creep_per_step(course: MemoryCourse) -> float | None:
    """Bytes a measured step adds, when the memory creeps (both halves grew; on the host by
    :data:`HOST_SHARE` of what the process held at least); else ``None``."""
    if len(course.used) < 3 or course.steps[-1] <= course.steps[0]:
        return None
    growth = course.used[-1] - course.used[0]
    halves = (course.used[1] - course.used[0], course.used[-1] - course.used[1])
    rate = growth / (course.steps[-1] - course.steps[0])
    if rate < RATE_MB * _MB or min(halves) < HALF_SHARE * growth:
        return None
    if course.memory == "host" and growth < HOST_SHARE * course.used[0]:
        return None  # an allocator warming up: a process's first epoch grows by tens of MB
    return rate


def add_creep(record: RunRecord) -> None:
    """Memory creeping in the measured steps, into ``record.findings``: a list the watched steps
    saw keeping tensors (``loop.memory-creep``, or ``loop.graph-kept`` with their bytes) is
    given when the memory still free would run out at its rate; with none, a creep the three
    readings show is a new ``loop.memory-creep`` finding (at the ``loop.graph-kept`` line when
    there is one). The findings are replaced, never changed: a snapshot's record shares them."""
    course = record.memory_course
    listed = False
    for i, finding in enumerate(record.findings):
        if finding.kind not in ("loop.memory-creep", "loop.graph-kept"):
            continue
        rate = float(finding.detail.get("mb_per_step") or 0.0) * _MB
        if rate < RATE_MB * _MB:
            continue
        listed = True
        cpu = finding.detail.get("device", "cpu") == "cpu"
        if course is not None and (course.memory == "host") == cpu:
            record.findings[i] = _runs_out(finding, rate, course.free, record)
    rate = creep_per_step(course) if course is not None and not listed else None
    if course is None or rate is None:
        return
    steps = course.steps[-1] - course.steps[0]
    first, last = course.used[0], course.used[-1]
    kept = next((f for f in record.findings if f.kind == "loop.graph-kept"), None)
    if kept is not None:
        fix = f"{kept.fix} (the line that keeps it: the graph-kept finding)"
        where = (kept.file, kept.line, kept.source)
    else:
        fix = (
            "look for what the loop keeps from each step: a list of outputs or losses as "
            "tensors (keep .item() or .detach().cpu()), features kept for an epoch-end metric "
            "(keep them on the CPU, or compute the metric as it goes), a cache that is never "
            "cleared; torchdoctor run --whole tells whether it goes on over the whole run"
        )
        where = (None, None, None)
    finding = Finding(
        kind="loop.memory-creep",
        title=f"memory grew by {rate / _MB:.1f} MiB a step over {steps} measured steps "
        f"({_KINDS.get(course.memory, course.memory)} {first / _MB:.0f} -> {last / _MB:.0f} MiB)",
        fix=fix,
        file=where[0],
        line=where[1],
        source=where[2],
        detail={"mb_per_step": round(rate / _MB, 2), "memory": course.memory},
    )
    record.findings.append(_runs_out(finding, rate, course.free, record))


def _runs_out(finding: Finding, rate: float, free: int | None, record: RunRecord) -> Finding:
    """The finding with when the memory still free would run out at ``rate`` bytes a step (and
    in how long at the median measured step), and what it holds at an epoch's end; critical
    when it would run out within an epoch, or within :data:`CRITICAL_S` where no epoch is
    known."""
    if free is None or rate <= 0:
        return finding
    detail = dict(finding.detail)
    left = free / rate
    detail["steps_to_exhaustion"] = int(left)
    words = f"the {free / _MB / 1024:.1f} GiB still free run out in about {left:,.0f} steps"
    step_ms = statistics.median(record.steps.step_ms) if record.steps.step_ms else None
    seconds = left * step_ms / 1000.0 if step_ms else None
    if seconds is not None:
        detail["seconds_to_exhaustion"] = round(seconds, 1)
        words += f" ({_duration(seconds)} at {step_ms:.1f} ms a step)"
    epoch = _epoch_steps(record)
    least = "at least " if finding.kind == "loop.graph-kept" else ""  # its graphs hold more
    if epoch:
        detail["epoch_steps"] = epoch
        text = (
            f"; kept over an epoch ({epoch} steps of its loader) it holds {least or 'about '}"
            f"{epoch * rate / _MB:,.0f} MiB at the epoch's end; kept over the run, {words}"
        )
    else:
        text = f"; at this rate {words}"
    critical = (epoch is not None and epoch >= left) or (
        seconds is not None and seconds < CRITICAL_S and epoch is None
    )
    return replace(
        finding,
        title=finding.title + text,
        severity="critical" if critical or finding.severity == "critical" else finding.severity,
        detail=detail,
    )


def _epoch_steps(record: RunRecord) -> int | None:
    """Steps in an epoch of the main loader, when its length and batch size are known."""
    loader = record.loader
    if loader is None or not loader.dataset_len or not loader.batch_size:
        return None
    full, rest = divmod(loader.dataset_len, loader.batch_size)
    return full + (1 if rest and not loader.drop_last else 0) or None


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
