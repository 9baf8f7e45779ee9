"""Multi-GPU views of a trace: communication/computation overlap and per-rank step skew."""

from __future__ import annotations

import statistics

from ..record import CommOverlap, RankSkew
from ..trace import RankTrace
from . import _intervals
from .trace_gpu import GpuView, kernel_types

#: A rank whose median step is this much slower than the fastest rank's is a straggler.
STRAGGLER_SKEW = 0.10


def comm_overlap(t: RankTrace, view: GpuView) -> CommOverlap | None:
    """Overlap of communication and computation kernels; ``None`` without communication."""
    comm, comp = [], []
    types = kernel_types(t.names, view.name)
    for s, e, nid in zip(view.ts, view.end, view.name, strict=True):
        kind = types[nid]
        if kind == "COMMUNICATION":
            comm.append((s, e))
        elif kind == "COMPUTATION":
            comp.append((s, e))
    if not comm:
        return None
    comm_m, comp_m = _intervals.merge(comm), _intervals.merge(comp)
    comm_us, comp_us = _intervals.covered(comm_m), _intervals.covered(comp_m)
    both = _intervals.intersection(comm_m, comp_m)
    span = max(view.end) - min(view.ts)
    return CommOverlap(
        comm_ms=comm_us / 1000.0,
        compute_ms=comp_us / 1000.0,
        overlapped_ms=both / 1000.0,
        overlap_pct=100.0 * both / comm_us if comm_us else 0.0,
        exposed_pct=100.0 * (comm_us - both) / span if span > 0 else 0.0,
    )


def rank_skew(step_ms_by_rank: dict[str, list[float]]) -> RankSkew | None:
    """Compare ranks' median step times; ``None`` with fewer than two ranks with steps."""
    medians = {r: statistics.median(v) for r, v in step_ms_by_rank.items() if v}
    if len(medians) < 2:
        return None
    slowest = max(medians, key=medians.__getitem__)
    fastest = min(medians, key=medians.__getitem__)
    skew = (medians[slowest] - medians[fastest]) / medians[fastest] if medians[fastest] else 0.0
    return RankSkew(medians, slowest, fastest, skew, skew >= STRAGGLER_SKEW)
