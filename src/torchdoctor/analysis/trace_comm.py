"""Multi-GPU views of a trace: communication/computation overlap, and the straggler.

The straggler is found as ``torchdoctor run`` finds it (see :mod:`.distributed`): the rank whose
**own work** per step is at least :data:`STRAGGLER_RATIO` times the median of the other ranks'.
``run`` measures own work as a step with communication made free (DDP's ``no_sync()``); a trace
has no such steps, but it sees every rank's communication kernels, so own work here is the mean
step less the **exposed communication** per step (the ``communication`` step part: NCCL/RCCL
kernels with no computation under them). A rank that waits for a straggler waits inside those
kernels, so its own work shrinks by exactly its wait.
"""

from __future__ import annotations

import statistics
from array import array

from ..record import CommOverlap, RankReport, RankSkew
from ..trace import RankTrace
from . import _intervals
from .distributed import STRAGGLER_RATIO
from .trace_gpu import GpuView, rows_by_type

#: How a straggler's slowest step part is named (the words of ``run`` where they exist).
TRACE_PART_WORDS = {
    "gpu_kernels": "GPU compute (kernels)",
    "memcpy": "GPU memory copies",
    "memset": "GPU memsets",
    "communication": "communication",
    "runtime": "CUDA/HIP runtime calls",
    "dataloader": "waiting for data",
    "cpu_ops": "CPU ops",
    "other": "host work outside any profiled op (Python)",
}


def comm_overlap(t: RankTrace, view: GpuView) -> CommOverlap | None:
    """Overlap of communication and computation kernels; ``None`` without communication."""
    by_type = rows_by_type(t.names, view)
    comm, comp = by_type.get("COMMUNICATION"), by_type.get("COMPUTATION", array("q"))
    if not comm:
        return None
    comm_m = _intervals.merge_ends(view.ts, view.end, comm)
    comp_m = _intervals.merge_ends(view.ts, view.end, comp)
    comm_us, comp_us = _intervals.spans_covered(comm_m), _intervals.spans_covered(comp_m)
    both = _intervals.intersection(comm_m, comp_m)
    span = max(view.end) - min(view.ts)
    return CommOverlap(
        comm_ms=comm_us / 1000.0,
        compute_ms=comp_us / 1000.0,
        overlapped_ms=both / 1000.0,
        overlap_pct=100.0 * both / comm_us if comm_us else 0.0,
        exposed_pct=100.0 * (comm_us - both) / span if span > 0 else 0.0,
    )


def rank_skew(ranks: list[RankReport]) -> RankSkew | None:
    """The ranks' steps and own work side by side, and the straggler if there is one.

    ``None`` with fewer than two ranks with analysed steps. Per-rank arithmetic only: the step
    parts were summed by :mod:`.trace_steps`.
    """
    timed = [r for r in ranks if r.analysed_steps and r.step_wall_ms > 0]
    if len(timed) < 2:
        return None
    medians = {
        r.label: statistics.median(s.wall_ms for s in r.steps[: r.analysed_steps]) for r in timed
    }
    slowest = max(medians, key=medians.__getitem__)
    fastest = min(medians, key=medians.__getitem__)
    skew = (medians[slowest] - medians[fastest]) / medians[fastest] if medians[fastest] else 0.0
    step = {r.label: r.step_wall_ms / r.analysed_steps for r in timed}
    comm = {r.label: r.step_parts_ms.get("communication", 0.0) / r.analysed_steps for r in timed}
    own = {k: step[k] - comm[k] for k in step}
    out = RankSkew(
        median_step_ms=medians,
        slowest=slowest,
        fastest=fastest,
        skew=skew,
        straggler=False,
        own_ms={k: round(v, 3) for k, v in own.items()},
        exposed_comm_ms={k: round(v, 3) for k, v in comm.items()},
    )
    slow = max(timed, key=lambda r: own[r.label])
    others = [r for r in timed if r is not slow]
    median_own = statistics.median(own[r.label] for r in others)
    if median_own <= 0 or own[slow.label] < STRAGGLER_RATIO * median_own:
        return out
    s = slow.label
    waits = [max(comm[r.label] - comm[s], 0.0) + max(step[s] - step[r.label], 0.0) for r in others]
    out.straggler = True
    out.straggler_rank = s
    out.part = _slowest_part(slow, others)
    out.excess_ms = round(own[s] - median_own, 3)
    out.waiting = [r.label for r in others]
    out.wait_ms = round(sum(waits) / len(waits), 3)
    return out


def _slowest_part(slow: RankReport, others: list[RankReport]) -> str:
    """The step part, communication aside, in which ``slow`` spends most over the others."""

    def per_step(r: RankReport, part: str) -> float:
        return r.step_parts_ms.get(part, 0.0) / max(1, r.analysed_steps)

    excess = {
        p: per_step(slow, p) - statistics.median(per_step(o, p) for o in others)
        for p in TRACE_PART_WORDS
        if p != "communication"
    }
    return max(excess, key=excess.__getitem__)
