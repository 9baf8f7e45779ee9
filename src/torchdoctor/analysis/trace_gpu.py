"""GPU temporal and idle-time breakdowns of a trace, with HolisticTraceAnalysis's definitions.

The numbers agree with HTA 0.5.0 on the same file (tests/unit/analysis/test_trace_hta_agreement.py holds
them to 0.5 percentage points against tests/data/hta_reference.json). The definitions, restated:

- **GPU events** are the events with a CUDA/HIP stream (kernels, memcpy, memset, stream syncs).
- **Kernel span**: first GPU event start to last GPU event end. **Idle** is the span minus the
  union of all GPU event intervals; **compute** is the union of computation kernels (not NCCL,
  not memcpy/memset, not syncs); **non-compute** is the rest of the busy time.
- **Last ProfilerStep left out** (HTA's default): when the trace set has two or more
  ProfilerStep names, host events from the start of the last ProfilerStep on are dropped, and
  GPU events are kept only when a kept host event shares their correlation id.
- **Timestamp rounding**: when any event has a fractional ``ts`` (nanosecond-resolution traces),
  start times are rounded up and end times down to whole microseconds, as HTA does.
- **Idle split**, per stream, over kernels, memcpy and memset (not syncs): each gap before a GPU event is *host wait* when the host call that
  launched it started after the previous event on the stream ended (the GPU waited for the
  CPU); else *kernel wait* when the gap is under :data:`CONSECUTIVE_KERNEL_DELAY_US`; else
  *other* (waiting on another stream, an event, communication).
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from ..record import IdleBreakdown, TemporalBreakdown
from ..trace import CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, RankTrace
from . import _intervals

#: Gaps between GPU events on one stream shorter than this count as kernel-launch overhead
#: ("kernel wait"). HTA's default ``consecutive_kernel_delay=30``, applied to trace units (us).
CONSECUTIVE_KERNEL_DELAY_US = 30.0

_COMM_RE = re.compile(r"^nccl.*Kernel")
_MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
#: Device-wide sync events have no stream but run on the GPU.
_DEVICE_SYNC_NAMES = ("Event Sync", "Context Sync")


def kernel_type(name: str) -> str:
    """``COMMUNICATION``, ``MEMORY``, ``COMPUTATION`` or ``OTHER`` for a GPU event name."""
    if _COMM_RE.match(name):
        return "COMMUNICATION"
    if _MEMORY_RE.match(name):
        return "MEMORY"
    if not _NOT_COMPUTE_RE.match(name):
        return "COMPUTATION"
    return "OTHER"


def kernel_types(names: list[str], ids: list[int]) -> dict[int, str]:
    """:func:`kernel_type` of each distinct name id in ``ids`` (computed once per name)."""
    return {nid: kernel_type(names[nid]) for nid in set(ids)}


@dataclass
class GpuView:
    """The GPU events of one rank after HTA's filtering: parallel columns, one entry per event
    (``array``: 8 bytes an entry, where a list of floats takes 32)."""

    rank_label: str
    ts: array[float] = field(default_factory=lambda: array("d"))
    end: array[float] = field(default_factory=lambda: array("d"))
    stream: array[int] = field(default_factory=lambda: array("q"))
    name: array[int] = field(default_factory=lambda: array("q"))
    #: start of the host call that launched the event (nan when unknown)
    launch_ts: array[float] = field(default_factory=lambda: array("d"))
    #: rows of the RankTrace (for names, categories)
    row: array[int] = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.ts)


def step_names(traces: list[RankTrace]) -> set[str]:
    """Distinct names containing ``ProfilerStep`` across ``traces`` (HTA counts symbols)."""
    out: set[str] = set()
    for t in traces:
        out.update(n for n in t.names if "ProfilerStep" in n)
    return out


def _times(t: RankTrace) -> tuple[Callable[[int], float], Callable[[int], float]]:
    """A row's start and end time, rounded like HTA when the trace has fractional timestamps
    (computed per row: no column of them is held beside the trace's)."""
    ts, dur = t.ts, t.dur
    if not t.ts_fractional:
        return ts.__getitem__, lambda i: ts[i] + dur[i]
    ceil, floor = math.ceil, math.floor
    return (lambda i: float(ceil(ts[i]))), (lambda i: float(floor(ts[i] + dur[i])))


def gpu_view(t: RankTrace, n_step_names: int, include_last_step: bool = False) -> GpuView:
    """Select the GPU events of ``t`` as HTA does (see the module docstring)."""
    start, end = _times(t)
    stream, corr, name = t.stream, t.correlation, t.name
    sync_ids = {i for i, n in enumerate(t.names) if n in _DEVICE_SYNC_NAMES}
    n = len(t)
    is_gpu = bytearray((stream[i] >= 0 and corr[i] >= 0) or name[i] in sync_ids for i in range(n))

    #: how many copies of a GPU row the view holds, where that is not one
    multiplicity: dict[int, int] = {}
    keep = bytearray(b"\x01") * n
    filtered = False
    if n_step_names >= 2:
        step_ids = {i for i, nm in enumerate(t.names) if "ProfilerStep" in nm}
        step_rows = [i for i in range(n) if not is_gpu[i] and name[i] in step_ids]
        if step_rows:
            filtered = True
            last_start = max(start(i) for i in step_rows)
            last_end = max(end(i) for i in step_rows)
            for i in range(n):
                if not is_gpu[i]:
                    keep[i] = start(i) <= last_end if include_last_step else start(i) < last_start

    # The host event each GPU event links to: the last host event (in file order) that carries
    # the same correlation id. One dict: how many kept host events share a correlation is
    # counted apart only for the few correlations more than one host event carries.
    host_by_corr: dict[int, int] = {}
    repeated: dict[int, int] = {}
    uncorrelated_kept = False
    streamed = array("q")  # the rows with a stream: the view's rows are among them
    for i in range(n):
        if stream[i] != -1:
            streamed.append(i)
        if is_gpu[i]:
            continue
        c = corr[i]
        if c == -1:
            uncorrelated_kept = uncorrelated_kept or bool(keep[i])
            continue
        h = host_by_corr.get(c)
        if h is not None:
            repeated[c] = repeated.get(c, keep[h]) + keep[i]
        host_by_corr[c] = i

    if filtered:
        for i in streamed:
            if is_gpu[i]:
                # An inner join: one copy per kept host event with this correlation. Device
                # syncs without a correlation (-1) would match every host event; copies change
                # no union and syncs are not in the idle split, so keep one.
                c = corr[i]
                if c == -1:
                    copies = int(uncorrelated_kept)
                elif c in repeated:
                    copies = repeated[c]
                else:
                    h = host_by_corr.get(c)
                    copies = keep[h] if h is not None else 0
                if copies != 1:
                    multiplicity[i] = copies
                keep[i] = copies > 0

    view = GpuView(t.label)
    nan = math.nan
    for i in streamed:
        if not keep[i]:
            continue
        if is_gpu[i]:
            h = host_by_corr.get(corr[i])
            launch = start(h) if h is not None and keep[h] else nan
        else:
            launch = nan
        s, e = start(i), end(i)
        for _ in range(multiplicity.get(i, 1)):
            view.ts.append(s)
            view.end.append(e)
            view.stream.append(stream[i])
            view.name.append(name[i])
            view.launch_ts.append(launch)
            view.row.append(i)
    return view


def rows_by_type(names: list[str], view: GpuView) -> dict[str, array[int]]:
    """The view's rows by :func:`kernel_type` of their names."""
    types = kernel_types(names, view.name)
    out: dict[str, array[int]] = {}
    for k, nid in enumerate(view.name):
        rows = out.get(types[nid])
        if rows is None:
            rows = out[types[nid]] = array("q")
        rows.append(k)
    return out


def temporal_breakdown(t: RankTrace, view: GpuView) -> TemporalBreakdown | None:
    """The temporal breakdown of one rank; ``None`` when it has no GPU events."""
    if not view.ts:
        return None
    names = t.names
    span = max(view.end) - min(view.ts)
    busy = _intervals.spans_covered(_intervals.merge_ends(view.ts, view.end, range(len(view))))
    by_type_us = {
        k: _intervals.spans_covered(_intervals.merge_ends(view.ts, view.end, rows))
        for k, rows in rows_by_type(names, view).items()
    }
    compute = by_type_us.get("COMPUTATION", 0.0)
    idle = span - busy
    non_compute = span - compute - idle

    def pct(x: float) -> float:
        return 100.0 * x / span if span > 0 else 0.0

    return TemporalBreakdown(
        rank=view.rank_label,
        kernel_span_us=span,
        idle_us=idle,
        compute_us=compute,
        non_compute_us=non_compute,
        idle_pct=pct(idle),
        compute_pct=pct(compute),
        non_compute_pct=pct(non_compute),
        by_type_us=by_type_us,
    )


IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")


#: The idle split looks at these categories only (stream syncs are waits, not work). The reader
#: stores the old spellings (``Kernel``, ``Memcpy``, ``Memset``) under these names.
IDLE_SPLIT_CATEGORIES = (CAT_KERNEL, CAT_MEMSET, CAT_MEMCPY)


def idle_breakdown(
    t: RankTrace, view: GpuView, consecutive_kernel_delay_us: float = CONSECUTIVE_KERNEL_DELAY_US
) -> IdleBreakdown | None:
    """Split the gaps between GPU events on each stream into host/kernel/other wait."""
    cat_ids = {t.cat_id(c) for c in IDLE_SPLIT_CATEGORIES} - {-1}
    per_stream: dict[int, list[int]] = {}
    for k, s in enumerate(view.stream):
        if t.cat[view.row[k]] in cat_ids:
            per_stream.setdefault(s, []).append(k)
    if not per_stream:
        return None
    streams_us: dict[str, dict[str, float]] = {}
    for s, ks in per_stream.items():
        ks.sort(key=lambda k: view.ts[k])
        sums = dict.fromkeys(IDLE_CATEGORIES, 0.0)
        prev_end = None
        for k in ks:
            if prev_end is not None:
                gap = view.ts[k] - prev_end
                launch = view.launch_ts[k]
                if launch > prev_end:  # False for nan, as in HTA
                    sums["host_wait"] += gap
                elif gap < consecutive_kernel_delay_us:
                    sums["kernel_wait"] += gap
                else:
                    sums["other"] += gap
            prev_end = view.end[k]
        streams_us[str(s)] = sums
    total = {c: sum(v[c] for v in streams_us.values()) for c in IDLE_CATEGORIES}
    whole = sum(total.values())
    share = {c: (100.0 * total[c] / whole if whole > 0 else 0.0) for c in IDLE_CATEGORIES}
    return IdleBreakdown(view.rank_label, streams_us, total, share)
