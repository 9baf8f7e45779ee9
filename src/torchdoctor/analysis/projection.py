"""The measured job's step projected to more ranks (docs/distributed.md, "Many ranks,
projected"). Torch-free.

What is measured stays: each rank's own work per step (weak scaling: every rank keeps its batch)
and the collectives a step issues, by kind, with their calls and bytes (FSDP2's, timed where
they are called; DDP's gradient all-reduce, from its gradients' bytes and its bucket size).
What is modelled is the collectives' time over N ranks on a link of a given bandwidth and
latency (``Link``: one the user gives, or a stated default per interconnect):

- ring: a collective of ``n`` bytes (its full buffer: the gathered output, the unreduced
  input, the all-reduced tensor) over N ranks takes ``s`` steps of ``α + n / (N β)``, where
  ``s`` is ``N - 1`` for an all-gather or a reduce-scatter and ``2 (N - 1)`` for an all-reduce;
- tree (all-reduce only, as NCCL uses it at scale; pipelined): ``2 log2(N) α + 2 n / β``;
  the faster of the two is taken, and named.

Nothing overlaps in the model (the measured job's gloo collectives block the step): where DDP's
buckets overlap backward on an accelerator, the projection is an upper bound. The script's own
collectives, whose bytes are not kept, are not projected: the figures say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..record import DistributedReport, ProjectedScale, Projection, RunRecord
from .job_findings import kind_words, size_words

#: The ranks each job is projected to.
SCALES = (8, 64, 512)


@dataclass(frozen=True)
class Link:
    """An interconnect: bandwidth per rank and direction, and latency per message."""

    name: str
    gbps: float
    latency_us: float

    def words(self) -> str:
        return f"{self.name}: {self.gbps:g} Gb/s per rank, {self.latency_us:g} µs a message"


#: Stated defaults per interconnect (nominal figures, not measured here).
LINKS = {
    "nvlink": Link("NVLink (H100 SXM, nominal)", 3600, 3),
    "infiniband": Link("InfiniBand NDR (nominal)", 400, 5),
    "ethernet": Link("100 Gb Ethernet (nominal)", 100, 20),
}
DEFAULT_LINK = "infiniband"


def parse_link(text: str) -> Link:
    """``nvlink``, ``infiniband``, ``ethernet``, or ``GBPS:US`` (e.g. ``200:8``).

    Raises:
        ValueError: neither, with what to pass.
    """
    if text in LINKS:
        return LINKS[text]
    gbps, sep, latency = text.partition(":")
    try:
        link = Link(f"{text} (given)", float(gbps), float(latency))
    except ValueError:
        link = None
    if not sep or link is None or not (link.gbps > 0 and link.latency_us >= 0):
        raise ValueError(
            f"--link {text!r}: give one of {', '.join(LINKS)}, or BANDWIDTH_GBPS:LATENCY_US "
            "(e.g. 200:8)"
        )
    return link


def collective_ms(kind: str, nbytes: float, ranks: int, link: Link) -> tuple[float, str]:
    """One collective's modelled time (ms) over ``ranks``, and the algorithm that gives it."""
    if ranks <= 1:
        return 0.0, "none"
    alpha, beta = link.latency_us * 1e-6, link.gbps * 1e9 / 8  # s, bytes/s
    steps = (2 if kind == "all_reduce" else 1) * (ranks - 1)
    ring = steps * (alpha + nbytes / ranks / beta)
    if kind != "all_reduce":
        return ring * 1e3, "ring"
    tree = 2 * math.log2(ranks) * alpha + 2 * nbytes / beta  # pipelined: latency per level
    return (tree * 1e3, "tree") if tree < ring else (ring * 1e3, "ring")


def step_collectives(job: RunRecord) -> list[tuple[str, float, float]]:
    """The collectives one step issues, as ``(kind, calls, bytes per call)``: FSDP2's as
    timed; DDP's gradient all-reduce, one call per bucket of its gradients."""
    out = [
        (kind, k["calls"], k["bytes"] / k["calls"])
        for kind, k in job.torch_collective_kinds.items()
        if k.get("calls")
    ]
    grads = float(job.seen.get("ddp_grad_bytes") or 0)
    if grads and not out:
        cap = float(job.seen.get("ddp_bucket_cap_mb") or 25) * 2**20
        buckets = max(math.ceil(grads / cap), 1)
        out.append(("all_reduce", float(buckets), grads / buckets))
    return out


def project(job: RunRecord, link: Link, scales: tuple[int, ...] = SCALES) -> Projection | None:
    """The job's step at each of ``scales`` ranks on ``link`` (None: nothing to project)."""
    report = job.distributed
    collectives = step_collectives(job)
    own = _own_ms(report) if report is not None else None
    if own is None or not collectives:
        return None
    out = []
    for ranks in scales:
        comm = sum(calls * collective_ms(kind, size, ranks, link)[0]
                   for kind, calls, size in collectives)  # fmt: skip
        step = own + comm
        out.append(ProjectedScale(ranks, round(comm, 3), round(step, 3), round(comm / step, 4)))
    modelled = [
        f"{kind_words(kind)} {calls:g} x {size_words(size)}" for kind, calls, size in collectives
    ]
    assumptions = [
        f"each rank's own work stays {own:.1f} ms a step (the measured ranks' mean; every rank "
        "keeps its batch)",
        "nothing overlaps: an upper bound where the collectives overlap backward",
    ]
    if any(r.collectives_ms for r in report.ranks):  # type: ignore[union-attr]
        assumptions.append("the script's own collectives are left out (their bytes are not kept)")
    return Projection(link=link.words(), own_ms=round(own, 3), collectives=modelled,
                      scales=out, assumptions=assumptions)  # fmt: skip


def _own_ms(report: DistributedReport) -> float | None:
    owns = [r.own_ms for r in report.ranks if r.own_ms is not None]
    return sum(owns) / len(owns) if owns else None
