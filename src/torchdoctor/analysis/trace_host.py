"""Host-side findings in a trace: syncs, pageable copies, launch overhead, top kernels."""

from __future__ import annotations

import re
import statistics
from bisect import bisect_left

from ..record import KernelStat, LaunchStats, PageableCopies, SyncReport, SyncSite
from ..trace import CAT_CPU_OP, CAT_KERNEL, CAT_MEMCPY, CAT_PYTHON, CAT_RUNTIME, RankTrace

#: Runtime calls that block the host until the device catches up (CUDA and HIP spellings).
#: cudaMemcpy without Async is synchronous for pageable memory and for device-to-host copies.
SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpyWithStream",
    }
)

#: Kernels shorter than this are "short": the ~5-10 us host cost of launching one is then
#: comparable to the work it launches.
SHORT_KERNEL_US = 10.0
#: Launch-bound when at least this share of kernels is short ...
LAUNCH_SHORT_KERNEL_SHARE = 0.5
#: ... and the host spent longer launching kernels than the GPU spent running them.
LAUNCH_CPU_OVER_GPU_RATIO = 1.0
#: How many kernels the top-kernels table lists.
TOP_KERNELS = 10

_LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "hipLaunchKernel", "hipExtLaunchKernel")
_FRAME_RE = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<func>.*)$")
#: Frames from these paths are library code, not the user's.
_LIBRARY_MARKERS = ("site-packages", "dist-packages", "/torch/", "torch/", "<frozen", "/lib/python")


def _user_frame(name: str) -> tuple[str, int, str] | None:
    m = _FRAME_RE.match(name)
    if not m or any(marker in m["file"] for marker in _LIBRARY_MARKERS):
        return None
    return m["file"], int(m["line"]), m["func"]


def _enclosing(t: RankTrace, targets: list[int], container_cat: int) -> dict[int, list[int]]:
    """For each target row, the rows of category ``container_cat`` on the same thread that
    enclose it, outer first.

    Events on one thread nest, so one sweep with a stack per thread finds them. Only the
    containers that start at or before some target on their thread and end at or after its
    start take part (a trace holds hundreds of thousands, the targets a few): no list of them
    all is made.
    """
    starts: dict[int, list[float]] = {}
    for r in targets:
        starts.setdefault(t.tid[r], []).append(t.ts[r])
    for s in starts.values():
        s.sort()
    by_tid: dict[int, list[tuple[float, int, int]]] = {}
    ts, dur, tid, cat = t.ts, t.dur, t.tid, t.cat
    for r in range(len(t)):
        if cat[r] != container_cat:
            continue
        on_thread = starts.get(tid[r])
        if on_thread is None:
            continue
        first = bisect_left(on_thread, ts[r])
        if first < len(on_thread) and on_thread[first] <= ts[r] + dur[r]:
            # kind 0 = container (sorted before a target at the same start), 1 = target
            by_tid.setdefault(tid[r], []).append((ts[r], 0, r))
    for r in targets:
        by_tid.setdefault(tid[r], []).append((ts[r], 1, r))
    out: dict[int, list[int]] = {}
    for items in by_tid.values():
        items.sort(key=lambda x: (x[0], x[1], -dur[x[2]]))
        stack: list[int] = []
        for start, kind, r in items:
            while stack and ts[stack[-1]] + dur[stack[-1]] <= start:
                stack.pop()
            if kind == 0:
                stack.append(r)
            else:
                end = start + dur[r]
                out[r] = [c for c in stack if ts[c] + dur[c] >= end]
    return out


def sync_report(t: RankTrace, window: tuple[float, float] | None = None) -> SyncReport:
    """Blocking runtime calls with counts, blocked time, the user's frame and the op."""
    runtime = t.cat_id(CAT_RUNTIME)
    sync_ids = {i for i, n in enumerate(t.names) if n in SYNC_CALLS}
    rows = (
        [
            i
            for i in range(len(t))
            if t.cat[i] == runtime
            and t.name[i] in sync_ids
            and (window is None or window[0] <= t.ts[i] < window[1])
        ]
        if sync_ids and runtime >= 0
        else []
    )
    python = t.cat_id(CAT_PYTHON)
    has_stacks = python >= 0 and python in t.cat
    frames = _enclosing(t, rows, python) if has_stacks and rows else {}
    ops = _enclosing(t, rows, t.cat_id(CAT_CPU_OP)) if rows else {}
    sites: dict[tuple, SyncSite] = {}
    for r in rows:
        call = t.names[t.name[r]]
        user = None
        for c in reversed(frames.get(r, [])):
            user = _user_frame(t.names[t.name[c]])
            if user:
                break
        op_rows = ops.get(r, [])
        op = None
        if op_rows:
            outer, inner = t.names[t.name[op_rows[0]]], t.names[t.name[op_rows[-1]]]
            op = outer if outer == inner else f"{outer} > {inner}"
        key = (call, user, op)
        site = sites.get(key)
        if site is None:
            site = sites[key] = SyncSite(call, 0, 0.0, *(user or (None, None, None)), ops=op)
        site.count += 1
        site.blocked_ms += t.dur[r] / 1000.0
    ordered = sorted(sites.values(), key=lambda s: -s.blocked_ms)
    return SyncReport(
        count=len(rows),
        blocked_ms=sum(s.blocked_ms for s in ordered),
        sites=ordered,
        has_stacks=has_stacks,
    )


def pageable_copies(t: RankTrace) -> PageableCopies:
    """GPU copies from or to pageable (unpinned) host memory, which cannot overlap compute."""
    memcpy = t.cat_id(CAT_MEMCPY)
    count, total_us, nbytes = 0, 0.0, 0.0
    directions: dict[str, int] = {}
    for i in range(len(t)):
        if t.cat[i] != memcpy:
            continue
        name = t.names[t.name[i]]
        if "Pageable" not in name:
            continue
        count += 1
        total_us += t.dur[i]
        nbytes += t.copy_bytes.get(i, 0.0)
        direction = name.split(" ")[1] if " " in name else name
        directions[direction] = directions.get(direction, 0) + 1
    return PageableCopies(count, total_us / 1000.0, nbytes / 1e6, directions)


def launch_stats(t: RankTrace) -> LaunchStats:
    """Kernel durations against the host time spent launching them."""
    kernel = t.cat_id(CAT_KERNEL)
    runtime = t.cat_id(CAT_RUNTIME)
    launch_ids = {i for i, n in enumerate(t.names) if n in _LAUNCH_NAMES}
    durs = [t.dur[i] for i in range(len(t)) if t.cat[i] == kernel]
    launch = [t.dur[i] for i in range(len(t)) if t.cat[i] == runtime and t.name[i] in launch_ids]
    short = sum(1 for d in durs if d < SHORT_KERNEL_US)
    kernel_us, launch_us = sum(durs), sum(launch)
    share = short / len(durs) if durs else 0.0
    ratio = launch_us / kernel_us if kernel_us > 0 else 0.0
    return LaunchStats(
        kernels=len(durs),
        short_kernels=short,
        short_share=share,
        median_kernel_us=statistics.median(durs) if durs else 0.0,
        kernel_ms=kernel_us / 1000.0,
        launch_ms=launch_us / 1000.0,
        launches=len(launch),
        launch_over_gpu=ratio,
        launch_bound=bool(durs)
        and share >= LAUNCH_SHORT_KERNEL_SHARE
        and ratio >= LAUNCH_CPU_OVER_GPU_RATIO,
    )


def top_kernels(t: RankTrace, limit: int = TOP_KERNELS) -> list[KernelStat]:
    """The kernels with the most total GPU time: name, count, total and mean time, share."""
    kernel = t.cat_id(CAT_KERNEL)
    totals: dict[int, list[float]] = {}
    for i in range(len(t)):
        if t.cat[i] == kernel:
            acc = totals.setdefault(t.name[i], [0, 0.0])
            acc[0] += 1
            acc[1] += t.dur[i]
    all_us = sum(v[1] for v in totals.values())
    ordered = sorted(totals.items(), key=lambda kv: -kv[1][1])[:limit]
    return [
        KernelStat(
            name=t.names[nid],
            count=int(count),
            total_ms=total / 1000.0,
            mean_us=total / count,
            share_pct=100.0 * total / all_us if all_us else 0.0,
        )
        for nid, (count, total) in ordered
    ]
