"""The verdict and findings of a trace, in the same vocabulary as ``torchdoctor run``.

The step parts (see :mod:`.trace_steps`) are grouped into what bounds the run:

- **input**: DataLoader time (``enumerate(DataLoader)`` labels);
- **compute**: GPU kernels, memcpy and memset, claimed first (on a CPU-only trace: CPU ops,
  which do the math there);
- **communication**: NCCL/RCCL kernels with no computation running under them;
- **host**: CUDA/HIP runtime calls, CPU ops and un-instrumented time, while the GPU does nothing.

With several ranks, a **straggler** (see :func:`.trace_comm.rank_skew`) bounds the job as in
``torchdoctor run``: the verdict is the bottleneck of the straggler's slowest part, and the other
ranks wait for it. Otherwise the ranks are balanced and their shares are averaged; the rules, in
order: input share at least :data:`INPUT_BOUND_SHARE` is INPUT-BOUND; exposed communication at
least :data:`COMMUNICATION_BOUND_SHARE` is COMMUNICATION-BOUND; otherwise the larger of compute
and host decides.
"""

from __future__ import annotations

import dataclasses

from ..record import (
    COMMUNICATION_BOUND,
    COMPUTE_BOUND,
    HOST_BOUND,
    INPUT_BOUND,
    UNKNOWN,
    Finding,
    KernelStat,
    RankReport,
    RankSkew,
    Verdict,
)
from .job_findings import NEXT_COMMUNICATION, STRAGGLER_FIX
from .trace_comm import STRAGGLER_RATIO, TRACE_PART_WORDS
from .trace_gpu import CONSECUTIVE_KERNEL_DELAY_US
from .trace_host import (
    LAUNCH_CPU_OVER_GPU_RATIO,
    LAUNCH_SHORT_KERNEL_SHARE,
    SHORT_KERNEL_US,
)

#: DataLoader share of step time from which the run is INPUT-BOUND. The GPU cannot be kept
#: busy while the host waits this long for each batch.
INPUT_BOUND_SHARE = 0.30
#: Exposed communication share of step time from which the run is COMMUNICATION-BOUND.
COMMUNICATION_BOUND_SHARE = 0.25
#: DataLoader share worth a finding even when it does not bound the run.
DATALOADER_NOTABLE_SHARE = 0.10
#: Communication overlapped with computation below this percentage earns a finding.
COMM_OVERLAP_LOW_PCT = 50.0
#: Host syncs cost worth a warning, as a share of step time (smaller ones are info).
SYNC_WARNING_SHARE = 0.01


def thresholds() -> dict[str, float]:
    """Every named threshold the trace analyses use, for the record."""
    return {
        "INPUT_BOUND_SHARE": INPUT_BOUND_SHARE,
        "COMMUNICATION_BOUND_SHARE": COMMUNICATION_BOUND_SHARE,
        "DATALOADER_NOTABLE_SHARE": DATALOADER_NOTABLE_SHARE,
        "COMM_OVERLAP_LOW_PCT": COMM_OVERLAP_LOW_PCT,
        "SYNC_WARNING_SHARE": SYNC_WARNING_SHARE,
        "STRAGGLER_RATIO": STRAGGLER_RATIO,
        "SHORT_KERNEL_US": SHORT_KERNEL_US,
        "LAUNCH_SHORT_KERNEL_SHARE": LAUNCH_SHORT_KERNEL_SHARE,
        "LAUNCH_CPU_OVER_GPU_RATIO": LAUNCH_CPU_OVER_GPU_RATIO,
        "CONSECUTIVE_KERNEL_DELAY_US": CONSECUTIVE_KERNEL_DELAY_US,
    }


def part_group(part: str, has_gpu: bool) -> str:
    """The group (input, compute, communication, host) a step part belongs to."""
    if part == "dataloader":
        return "input"
    if part == "communication":
        return "communication"
    if has_gpu:
        return "compute" if part in ("gpu_kernels", "memcpy", "memset") else "host"
    return "compute" if part == "cpu_ops" else "host"


def group_shares(rank: RankReport) -> dict[str, float]:
    """Input / compute / communication / host shares (0..1) of one rank's step time."""
    out = dict.fromkeys(("input", "compute", "communication", "host"), 0.0)
    for part, share in rank.step_shares.items():
        out[part_group(part, rank.has_gpu)] += share
    return out


_GROUP_KIND = {"input": INPUT_BOUND, "compute": COMPUTE_BOUND, "host": HOST_BOUND}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else f"{100 * x:.1f}%"


def _ms(x: float) -> str:
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"


def _ranks_words(labels: list[str]) -> str:
    """``rank(s) 0, 2`` for ranked labels (as ``run`` writes them), else the labels."""
    if all(label.startswith("rank ") for label in labels):
        return "rank(s) " + ", ".join(label[5:] for label in labels)
    return ", ".join(labels)


def _waits_for(label: str, skew: RankSkew | None) -> str:
    if skew is None or not skew.straggler or label not in skew.waiting:
        return ""
    return f" (it includes the wait for the straggler, {skew.straggler_rank})"


def straggler_bound(skew: RankSkew, ranks: list[RankReport]) -> str:
    """The verdict kind the straggler's slowest part says bounds the job."""
    has_gpu = any(r.has_gpu for r in ranks if r.label == skew.straggler_rank)
    return _GROUP_KIND.get(part_group(skew.part, has_gpu), COMPUTE_BOUND)


def verdict(ranks: list[RankReport], skew: RankSkew | None) -> Verdict:
    """What bounds the traced run (or job, with several ranks), with Why and Next."""
    usable = [r for r in ranks if r.step_wall_ms > 0]
    if not usable:
        return Verdict(
            UNKNOWN,
            "the trace holds no timed events to divide",
            "record a trace of a few training steps: torchdoctor run --trace DIR SCRIPT",
        )
    if skew is not None and skew.straggler:
        slow = [r for r in usable if r.label == skew.straggler_rank]
        if slow:
            return _straggler_verdict(skew, slow[0])
    v = _shared_verdict(usable)
    if len(usable) > 1 and skew is not None and skew.own_ms:
        own = skew.own_ms.values()
        balanced = (
            f"the {len(usable)} ranks are balanced (own work differs by "
            f"{_ms(max(own) - min(own))} ms per step); "
        )
        v = dataclasses.replace(v, why=balanced + v.why)
    return v


def _straggler_verdict(skew: RankSkew, slow: RankReport) -> Verdict:
    """The job bound by its straggler's bottleneck, in the words of ``run``'s job verdict."""
    kind = straggler_bound(skew, [slow])
    who = skew.straggler_rank
    why = (
        f"{who} is a straggler: it spends {_ms(skew.excess_ms)} ms per step more than the other "
        f"ranks on its own work, mostly {TRACE_PART_WORDS.get(skew.part, skew.part)}, and every other "
        f"rank waits for it in the collectives ({_ms(skew.wait_ms)} ms per step)"
    )
    own = _shared_verdict([slow], kind)
    if own.kind == kind:
        why += f"; on {who}: {own.why}"
    return Verdict(kind, why, f"on {who}: {own.next}", group_shares(slow))


def _shared_verdict(usable: list[RankReport], kind: str | None = None) -> Verdict:
    """The verdict of the ranks' averaged shares; ``kind`` forces the rule (its Why and Next)."""
    groups = ("input", "compute", "communication", "host")
    per_rank = [group_shares(r) for r in usable]
    shares = {g: sum(p[g] for p in per_rank) / len(per_rank) for g in groups}
    has_gpu = any(r.has_gpu for r in usable)
    idle = [r.temporal.idle_pct for r in usable if r.temporal]
    idle_pct = sum(idle) / len(idle) if idle else None
    where = "each step" if len(usable) == 1 else f"each step (mean of {len(usable)} ranks)"
    top = _top_kernel(usable)

    if kind == INPUT_BOUND or (kind is None and shares["input"] >= INPUT_BOUND_SHARE):
        return Verdict(
            INPUT_BOUND,
            f"the DataLoader took {_pct(shares['input'])} of {where}; the model waited for data",
            "run `torchdoctor run SCRIPT` for the DataLoader worker sweep and per-transform "
            "costs; raise num_workers, set pin_memory=True and persistent_workers=True, or "
            "cache decoded samples (`torchdoctor cache build`)",
            shares,
        )
    if kind is None and shares["communication"] >= COMMUNICATION_BOUND_SHARE:
        overlap = [r.comm.overlap_pct for r in usable if r.comm]
        ov = (
            f"; only {sum(overlap) / len(overlap):.0f}% of the communication overlapped computation"
            if overlap
            else ""
        )
        exposed = sum(
            r.step_parts_ms.get("communication", 0.0) / max(1, r.analysed_steps) for r in usable
        ) / len(usable)
        step = sum(r.step_wall_ms / max(1, r.analysed_steps) for r in usable) / len(usable)
        subject = "the rank spends" if len(usable) == 1 else "the ranks spend"
        return Verdict(
            COMMUNICATION_BOUND,
            f"{subject} {_pct(shares['communication'])} of a mean {_ms(step)} ms step in exposed "
            f"communication ({_ms(exposed)} ms per step: NCCL/RCCL kernels with no computation "
            f"under them, or waiting in them){ov}",
            NEXT_COMMUNICATION,
            shares,
        )
    if kind == COMPUTE_BOUND or (kind is None and shares["compute"] >= shares["host"]):
        if has_gpu:
            busy = f" (GPU idle {idle_pct:.1f}% of the kernel span)" if idle_pct is not None else ""
            why = f"GPU work filled {_pct(shares['compute'])} of {where}{busy}; host work hides behind it"
            nxt = (
                "make the kernels cheaper: mixed precision (torch.autocast, bf16/fp16), "
                "torch.compile to fuse ops, channels_last for convolutions"
            )
        else:
            why = f"PyTorch CPU ops (the math) took {_pct(shares['compute'])} of {where}"
            nxt = "the model's compute bounds the run: use a GPU, torch.compile, or a smaller model"
        if top:
            nxt += f"; the top kernel {top.name[:60]!r} takes {top.share_pct:.0f}% of GPU time"
        return Verdict(COMPUTE_BOUND, why, nxt, shares)

    if has_gpu and idle_pct is not None:
        waits = [r.idle.share_pct["host_wait"] for r in usable if r.idle]
        host_wait = (
            f", {sum(waits) / len(waits):.0f}% of that waiting for the host" if waits else ""
        )
        why = f"the GPU sat idle {idle_pct:.1f}% of the kernel span{host_wait}; "
    else:
        why = ""
    parts = _mean_parts(usable)
    why += (
        f"the host spent {_pct(parts['cpu_ops'])} of {where} in CPU ops, "
        f"{_pct(parts['runtime'])} in CUDA/HIP runtime calls and {_pct(parts['other'])} outside "
        "any profiled op (Python)"
    )
    nxt = _host_next(usable, parts)
    return Verdict(HOST_BOUND, why, nxt, shares)


def _mean_parts(ranks: list[RankReport]) -> dict[str, float]:
    keys = ranks[0].step_shares.keys()
    return {k: sum(r.step_shares[k] for r in ranks) / len(ranks) for k in keys}


def _top_kernel(ranks: list[RankReport]) -> KernelStat | None:
    tops = [r.top_kernels[0] for r in ranks if r.top_kernels]
    return max(tops, key=lambda k: k.total_ms) if tops else None


def _host_next(ranks: list[RankReport], parts: dict[str, float]) -> str:
    steps = []
    syncs = sum(r.syncs.count for r in ranks)
    blocked = sum(r.syncs.blocked_ms for r in ranks)
    wall = sum(r.step_wall_ms for r in ranks)
    if syncs and blocked >= SYNC_WARNING_SHARE * wall:
        steps.append(f"remove the {syncs} host syncs listed below (.item(), .cpu(), print)")
    if any(r.launch.launch_bound for r in ranks):
        steps.append(
            "cut kernel launches: CUDA graphs or torch.compile(mode='reduce-overhead'), "
            "fused optimizers (foreach/fused=True)"
        )
    if any(r.pageable_memcpy.count for r in ranks):
        steps.append("pin host memory (DataLoader pin_memory=True) and copy with non_blocking=True")
    if parts["runtime"] >= max(parts["cpu_ops"], parts["other"]):
        steps.append(
            "find which CUDA runtime calls block the host (cudaMemcpy*, synchronize) in the trace"
        )
    elif parts["cpu_ops"] >= parts["other"]:
        steps.append(
            "the host is slow at dispatching PyTorch ops: many small ops per step cost more than "
            "their GPU work (torch.compile fuses them; CUDA graphs replay them without the host)"
        )
    steps.append(
        "give the GPU more work per launch: a larger batch, torch.compile to fuse small ops, "
        "and no per-step Python bookkeeping on tensors"
    )
    return "; ".join(steps)


def findings(ranks: list[RankReport], skew: RankSkew | None) -> list[Finding]:
    """Syncs, pageable copies, launch overhead, DataLoader share, comm overlap, stragglers."""
    out: list[Finding] = []
    for r in ranks:
        steps = max(1, r.analysed_steps)
        step_ms = r.step_wall_ms / steps if r.step_wall_ms else 0.0
        who = f" on {r.label}" if len(ranks) > 1 else ""
        for site in r.syncs.sites:
            where = f" in {site.function}()" if site.function else ""
            via = f" via {site.ops}" if site.ops else ""
            cost = site.blocked_ms / steps
            out.append(
                Finding(
                    kind="host-sync",
                    title=f"{site.call}{via}{where}: {site.count} calls{who}, host "
                    f"blocked {site.blocked_ms:.2f} ms",
                    fix="keep values on the device: drop .item()/.cpu()/print of tensors and "
                    "Python branches on tensor values inside the step; log every N steps",
                    file=site.file,
                    line=site.line,
                    calls_per_step=site.count / steps,
                    cost_ms=cost,
                    severity="warning"
                    if step_ms and cost >= SYNC_WARNING_SHARE * step_ms
                    else "info",
                    detail={"call": site.call, "ops": site.ops, "rank": r.label},
                )
            )
        if r.syncs.count and not r.syncs.has_stacks:
            out.append(
                Finding(
                    kind="no-stacks",
                    title=f"the trace has no Python stacks{who}, so syncs cannot be traced to lines",
                    fix="profile with torch.profiler.profile(with_stack=True)",
                    severity="info",
                )
            )
        pm = r.pageable_memcpy
        if pm.count:
            out.append(
                Finding(
                    kind="pageable-memcpy",
                    title=f"{pm.count} copies from/to pageable host memory{who} "
                    f"({pm.megabytes:.1f} MB, {pm.total_ms:.2f} ms on the GPU)",
                    fix="DataLoader(pin_memory=True) and tensor.to(device, non_blocking=True); "
                    "pageable copies block the host and cannot overlap compute",
                    calls_per_step=pm.count / steps,
                    cost_ms=pm.total_ms / steps,
                    detail=dataclasses.asdict(pm),
                )
            )
        ls = r.launch
        if ls.launch_bound:
            out.append(
                Finding(
                    kind="launch-bound",
                    title=f"launch-bound{who}: {100 * ls.short_share:.0f}% of "
                    f"{ls.kernels} kernels run under {SHORT_KERNEL_US:.0f} us and launching "
                    f"took {ls.launch_over_gpu:.1f}x their GPU time",
                    fix="fewer, bigger kernels: torch.compile (mode='reduce-overhead' uses CUDA "
                    "graphs), fused optimizers, a larger batch",
                    cost_ms=(ls.launch_ms - ls.kernel_ms) / steps,
                    detail=dataclasses.asdict(ls),
                )
            )
        share = r.dataloader_share
        if share >= DATALOADER_NOTABLE_SHARE:
            out.append(
                Finding(
                    kind="dataloader",
                    title=f"the DataLoader takes {_pct(share)} of step time{who}",
                    fix="run `torchdoctor run SCRIPT` for the worker sweep; raise num_workers, "
                    "pin_memory=True, persistent_workers=True",
                    cost_ms=share * step_ms,
                    severity="warning" if share >= INPUT_BOUND_SHARE else "info",
                )
            )
        comm = r.comm
        if comm and comm.overlap_pct < COMM_OVERLAP_LOW_PCT:
            exposed = r.step_parts_ms.get("communication", 0.0) / steps
            out.append(
                Finding(
                    kind="comm-overlap",
                    title=f"exposed communication{who}: {_ms(exposed)} ms per step "
                    f"({_pct(r.step_shares.get('communication', 0.0))} of the step); only "
                    f"{comm.overlap_pct:.0f}% of its {comm.comm_ms:.1f} ms of NCCL kernels "
                    f"overlaps computation{_waits_for(r.label, skew)}",
                    fix="let all-reduce run during backward (DDP buckets: bucket_cap_mb), "
                    "accumulate gradients with no_sync() to communicate less often",
                    cost_ms=exposed,
                    detail=dataclasses.asdict(comm),
                )
            )
    if skew and skew.straggler:
        out.append(straggler_finding(skew, ranks))
    order = {"critical": 0, "warning": 1, "info": 2}
    out.sort(key=lambda f: (order.get(f.severity, 3), -(f.cost_ms or 0.0)))
    return out


def straggler_finding(skew: RankSkew, ranks: list[RankReport]) -> Finding:
    """The straggler, in the words of ``run``'s straggler finding."""
    title = (
        f"{skew.straggler_rank} is a straggler: its own work per step is "
        f"{_ms(skew.excess_ms)} ms longer than the other ranks' (mostly "
        f"{TRACE_PART_WORDS.get(skew.part, skew.part)}); {_ranks_words(skew.waiting)} wait "
        f"{_ms(skew.wait_ms)} ms per step for it in the collectives"
    )
    return Finding(
        kind="straggler",
        title=title,
        fix=STRAGGLER_FIX[straggler_bound(skew, ranks)],
        cost_ms=skew.excess_ms,
        severity="critical",
        detail={
            "rank": skew.straggler_rank,
            "part": skew.part,
            "waiting": list(skew.waiting),
            "own_ms": dict(skew.own_ms),
            "exposed_comm_ms": dict(skew.exposed_comm_ms),
        },
    )
