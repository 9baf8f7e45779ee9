"""The findings a distributed job's record gets from its ranks together (the straggler, DDP's
bucket settings where communication is exposed, uneven inputs under Join), and the words of its
communication-bound verdicts (docs/distributed.md)."""

from __future__ import annotations

from ..record import (
    COMPUTE_BOUND,
    HOST_BOUND,
    INPUT_BOUND,
    DistributedReport,
    Finding,
    RunRecord,
    Straggler,
    split_where,
)
from ..record.part_names import PART_GROUPS, PART_WORDS

#: Share of the step spent in communication (or waiting in it) that makes a balanced job
#: communication-bound.
COMM_BOUND_SHARE = 0.30
#: What the straggler's slowest part says bounds the job: its verdict group's bound.
_GROUP_KIND = {"input": INPUT_BOUND, "compute": COMPUTE_BOUND, "host": HOST_BOUND}


def part_bound(part: str) -> str:
    """The verdict a step part's group names (``data_wait``: INPUT-BOUND)."""
    return _GROUP_KIND[PART_GROUPS.get(part, "compute")]


#: Share of communication in a balanced job's step from which DDP's bucket settings are advised.
BUCKET_ADVICE_SHARE = 0.15


#: What to do about a straggler, by the bottleneck its slowest part says (``analyze`` uses these
#: too).
STRAGGLER_FIX = {
    INPUT_BOUND: (
        "make this rank's input as fast as the others': its samples cost more (data skew, a "
        "slower disk or transform) or its loader has fewer workers; see its loader's advice"
    ),
    HOST_BOUND: "move this rank's extra per-step Python work (logging, checks, saving) off the step",
    COMPUTE_BOUND: (
        "give this rank the same work and device as the others: uneven batch shapes, a slower "
        "or shared device, or extra work only this rank does (evaluation, checkpointing)"
    ),
}


def _straggler_fix(part: str) -> str:
    return STRAGGLER_FIX[part_bound(part)]


def straggler_finding(s: Straggler) -> Finding:
    victims = ", ".join(str(v) for v in s.victims)
    return Finding(
        kind="straggler",
        title=(
            f"rank {s.rank} is a straggler: its own work per step is {s.excess_ms:.1f} ms longer "
            f"than the other ranks' (mostly {PART_WORDS.get(s.part, s.part)}); rank(s) {victims} "
            f"wait {s.wait_ms:.1f} ms per step for it in the collectives"
        ),
        fix=_straggler_fix(s.part),
        cost_ms=s.excess_ms,
        severity="critical",
        detail={"rank": s.rank, "part": s.part, "victims": s.victims},
    )


def bucket_finding(report: DistributedReport, seen: dict) -> Finding | None:
    """DDP's bucket settings, where a balanced job's measured communication is exposed."""
    share = comm_share(report)
    if report.stragglers or share is None or share < BUCKET_ADVICE_SHARE or "ddp_at" not in seen:
        return None
    file, line = split_where(str(seen["ddp_at"]))
    tips = [
        f"DDP(..., bucket_cap_mb=N): now {seen.get('ddp_bucket_cap_mb', 25):g} MB; smaller "
        "buckets start the all-reduce earlier in backward, larger ones send fewer messages"
    ]
    if not seen.get("ddp_gradient_as_bucket_view"):
        tips.append("gradient_as_bucket_view=True (gradients live in the buckets: no copy)")
    return Finding(
        kind="ddp.buckets",
        title=(
            f"communication is exposed: {share * 100:.0f}% of the step is spent in the "
            "all-reduce (or waiting in it) rather than hidden behind backward"
        ),
        fix="; ".join(tips),
        file=file,
        line=line,
        cost_ms=report.ranks[0].comm_ms if report.ranks else None,
        severity="info" if share < COMM_BOUND_SHARE else "warning",
    )


def comm_share(report: DistributedReport) -> float | None:
    shares = [
        r.comm_ms / r.step_ms.mean
        for r in report.ranks
        if r.comm_ms is not None and r.step_ms is not None and r.step_ms.mean > 0
    ]
    return sum(shares) / len(shares) if shares else None


def rank_of(record: RunRecord) -> int:
    return record.env.rank if record.env is not None else 0


def join_finding_of(records: list[RunRecord]) -> Finding | None:
    """:func:`join_finding` from the ranks' records."""
    joined = {rank_of(r): r.joined_at for r in records if r.joined_at is not None}
    samples = {rank_of(r): r.loader.dataset_len for r in records
               if r.loader is not None and isinstance(r.loader.dataset_len, int)}  # fmt: skip
    loader = next((r.loader for r in records if r.loader is not None), None)
    # a job stopped while a rank waited in Join: the ranks still stepping, with their steps
    going = {rank_of(r): int(r.seen.get("optimizer_steps", 0)) for r in records
             if r.joined_at is None} if joined else {}  # fmt: skip
    return join_finding(joined, samples, loader.created_at if loader else None, going)


def join_finding(
    joined: dict[int, int],
    samples: dict[int, int],
    where: str | None,
    going: dict[int, int] | None = None,
) -> Finding | None:
    """Ranks whose data ran out at different steps under ``Join`` (``joined``: rank -> the step
    its data ran out; ``samples``: rank -> its loader's samples, where known): the job went on,
    and the ranks that ran out first waited in Join, their share of each gradient a zero.
    ``going``: rank -> the steps of a rank still stepping when the job was stopped (Ctrl-C, the
    bound) while another waited in Join's loop."""
    last_joined = max(joined.values(), default=0)
    going = {r: s for r, s in (going or {}).items() if s > last_joined}
    ends = {**joined, **going}
    if not joined or len(ends) < 2 or len(set(ends.values())) < 2:
        return None
    first = min(joined, key=lambda r: (joined[r], r))
    last = max(ends, key=lambda r: (ends[r], -r))
    idle = ends[last] - joined[first]
    sizes = ""
    if first in samples and last in samples:
        sizes = f" ({samples[first]} samples against {samples[last]})"
    if last in going:
        ran = (
            f"rank {first}'s data ran out after {joined[first]} steps while rank {last} went on: "
            f"it was at step {going[last]} when the job was stopped"
        )
        waited = f"at least the last {idle} steps ({idle / ends[last]:.0%} of the job's so far)"
    else:
        ran = f"rank {first}'s data ran out after {joined[first]} steps, rank {last}'s after {joined[last]}"
        waited = f"the last {idle} steps ({idle / ends[last]:.0%} of the job's)"
    title = (
        f"uneven inputs under Join: {ran}{sizes}; Join kept the job from hanging, but rank "
        f"{first} waited in Join for {waited}, its share of each of their gradients a zero"
    )
    fix = (
        "where every rank may see the same amount of data, DataLoader(dataset, "
        "sampler=DistributedSampler(dataset)) gives each rank as many batches and keeps every "
        "rank working to the end; where the amounts must differ, Join is the right tool and "
        "this is its cost"
    )
    detail: dict = {"joined_at": {str(r): s for r, s in joined.items()}}
    if going:
        detail["going_at"] = {str(r): s for r, s in going.items()}
    file, line = split_where(where)
    return Finding(kind="ddp.uneven-inputs", title=title, fix=fix, file=file, line=line,
                   severity="warning", detail=detail)  # fmt: skip


def communication_next(seen: dict) -> str:
    """Where a balanced DDP job's communication can be hidden or shrunk, leaving out what the job
    does already (``seen``: accumulation under ``no_sync()``, a comm hook, bucket views)."""
    ways = ["a larger batch per rank (fewer all-reduces per sample)"]
    if not seen.get("ddp_no_sync_forwards"):
        ways.append("gradient accumulation under DDP's no_sync() for all but the last micro-step")
    ways.append("DDP(bucket_cap_mb=...) tuned so buckets overlap backward")
    if not seen.get("ddp_gradient_as_bucket_view"):
        ways.append("gradient_as_bucket_view=True")
    if not seen.get("ddp_comm_hook"):
        ways.append(
            "a compression hook (ddp_comm_hooks.default_hooks.bf16_compress_hook) on slow links"
        )
    text = f"hide or shrink the all-reduce: {', '.join(ways[:-1])}, and {ways[-1]}"
    already = []
    if seen.get("ddp_no_sync_forwards"):
        already.append("accumulates under no_sync()")
    if seen.get("ddp_comm_hook"):
        already.append(f"all-reduces through {seen['ddp_comm_hook']}")
    return text + (f" (the job already {' and '.join(already)})" if already else "")


#: Where a balanced job's communication can be hidden or shrunk (nothing known of the job).
NEXT_COMMUNICATION = communication_next({})


def sharded_next(seen: dict) -> str:
    """Where a sharded job (FSDP2) can hide or shrink the collectives torch issues for it,
    leaving out what its units do already (``seen``: ``fsdp_units``, ``fsdp_kept_after_forward``,
    ``fsdp_param_dtype``)."""
    units, kept = seen.get("fsdp_units", 0), seen.get("fsdp_kept_after_forward", 0)
    ways = [
        "fewer, larger fully_shard units (each is one all-gather before its forward and, "
        "resharded, one more before its backward)"
    ]
    if not units or kept < units:
        ways.append(
            "fully_shard(..., reshard_after_forward=False) keeps a unit's parameters gathered "
            "until its backward (one all-gather fewer per unit, more memory)"
        )
    if not seen.get("fsdp_param_dtype"):
        ways.append(
            "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16) "
            "halves their bytes"
        )
    ways.append("a model that fits one device trains with DDP, one all-reduce per bucket "
                "overlapping backward")  # fmt: skip
    already = []
    if units and kept == units:
        already.append("keeps every unit's parameters gathered after forward")
    if seen.get("fsdp_param_dtype"):
        already.append(f"gathers its parameters in {seen['fsdp_param_dtype']}")
    text = "issue fewer or smaller collectives: " + "; ".join(ways)
    return text + (f" (the job already {' and '.join(already)})" if already else "")


#: Where a job that all-reduces by hand (no DDP) can hide or shrink its communication.
NEXT_MANUAL = (
    "let DistributedDataParallel all-reduce the gradients (in buckets, overlapping backward), or "
    "all-reduce them by hand in one flattened tensor per step instead of one call per parameter"
)


def kind_words(kind: str, plural: bool = False) -> str:
    """A collective's kind in the report's words: ``all_gather`` is ``all-gather(s)``."""
    return kind.replace("_", "-") + ("s" if plural else "")


def issued_words(kinds: dict[str, dict[str, float]]) -> str:
    """``torch's collectives (FSDP2's), timed where the step waited for them: all-gathers
    19.1 ms a step (14 calls, 11.6 MB), ...``"""
    parts = [
        f"{kind_words(kind, plural=True)} {k['ms']:.1f} ms a step ({k['calls']:g} calls, "
        f"{size_words(k['bytes'])})"
        for kind, k in kinds.items()
    ]
    return "the collectives torch issued (FSDP2's), timed where the step waited for them: " + (
        ", ".join(parts) if parts else "none in the bounding rank's steps"
    )


def size_words(n: float) -> str:
    """``11.6 MB``, ``37.9 kB``, ``512 B``."""
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{n:.0f} B"
