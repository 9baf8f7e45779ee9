"""One verdict for a distributed job, from every rank's own record (pure; docs/distributed.md).

Under DDP every rank waits for the slowest at each all-reduce, so a rank's own verdict misleads:
the fast ranks' backward holds the wait (they look compute-bound), the slow rank's data wait
shows what bounds them all. The job is read from each rank's **own work** per step: its step with
communication made free (DDP's ``no_sync()`` phase), or, without that phase, its step less the
backward and forward time it spends beyond the fastest rank's (the wait shows there). The rank
whose own work is clearly the largest is the **straggler**, the others wait for it, and the job is
bound by the straggler's bottleneck. Without a straggler, a job whose ranks spend a large share of
the step communicating is COMMUNICATION-BOUND; otherwise the ranks agree and rank 0's verdict is
the job's.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable

from ..record import (
    COMMUNICATION_BOUND,
    COMPLETE,
    HOST_BOUND,
    INPUT_BOUND,
    PARTIAL,
    STATUS_PRECEDENCE,
    STEP_PARTS,
    STRAGGLER,
    WAITS,
    DistributedReport,
    Ending,
    Finding,
    RankRun,
    RunRecord,
    Stat,
    Status,
    Straggler,
    Verdict,
)
from ..record.part_names import PART_WORDS
from .compare import interval
from .job_findings import (
    COMM_BOUND_SHARE,
    NEXT_MANUAL,
    bucket_finding,
    comm_share,
    communication_next,
    issued_words,
    join_finding_of,
    part_bound,
    rank_of,
    sharded_next,
    straggler_finding,
)
from .projection import DEFAULT_LINK, LINKS, project
from .verdict import _NEXT_HOST, MIN_VERDICT_STEPS, _next_input, next_compute, summarise
from .whole_course import share_saves

#: A rank whose own work in a typical (median) step is this many times the other ranks' is a
#: straggler (and the others wait for it), ...
STRAGGLER_RATIO = 1.25
#: ... by at least this share of the job's step (what waiting for it costs every rank), ...
STRAGGLER_STEP_SHARE = 0.20
#: ... and the gap must hold at the low end of the 90% bootstrap interval of the ratio of its
#: median own work to the others' (each rank's own spread across its steps).
#: Measured steps each rank needs before any is called a straggler.
MIN_STEPS = MIN_VERDICT_STEPS


def combine(
    records: list[RunRecord],
    world_size: int | None = None,
    nnodes: int = 1,
    backend: str = "",
    ended: dict[int, str] | None = None,
    errors: dict[int, list[str]] | None = None,
    ending: Callable[[RunRecord], Ending] | None = None,
) -> RunRecord:
    """The job's record from its ranks' records (any order; each knows its rank in ``env``).

    The top-level series, loader and verdict inputs are the bounding rank's (the straggler, else
    rank 0); ``record.distributed`` holds every rank; the verdict is the job's. ``ended`` and
    ``errors`` say, per rank, how its process ended and the traceback of a rank that raised.
    ``ending`` decides how the job ended from the job as combined (the launcher's decision,
    ``process.ending.decide_job``); without it, the worst of its ranks' endings. Either is set
    before the job's verdict, which reads the status.
    """
    if not records:
        raise ValueError("a job record needs at least one rank's record")
    by_rank = sorted(records, key=rank_of)
    world = world_size or max(
        (r.env.world_size for r in by_rank if r.env is not None), default=len(by_rank)
    )
    for rec in by_rank:
        summarise(rec)
    share_saves(by_rank)  # run --whole: rank 0's saves that the others wait for
    ranks = [_rank_run(rec, (ended or {}).get(rank_of(rec), ""), errors) for rec in by_rank]
    _own_work(ranks)
    backends = [str(r.seen["backend"]) for r in by_rank if r.seen.get("backend")]
    report = DistributedReport(
        world_size=world,
        nnodes=nnodes,
        backend=backend or (backends[0] if backends else ""),
        ranks=ranks,
        missing_ranks=sorted(set(range(world)) - {r.rank for r in ranks}),
    )
    owns = [r.own_ms for r in ranks if r.own_ms is not None]
    if len(owns) >= 2:
        report.skew_ms = round(max(owns) - min(owns), 3)
    straggler = find_straggler(ranks)
    if straggler is not None:
        report.stragglers.append(straggler)
        report.bounding_rank = straggler.rank
    _comm_made_free(report)

    report.bounding_rank = _bounding(report, by_rank)
    bounding = next(rec for rec in by_rank if rank_of(rec) == report.bounding_rank)
    job = copy.deepcopy(bounding)
    job.distributed = report
    worst = worst_ending(by_rank)
    job.status = worst.status if worst is not None else worst_status([r.status for r in ranks])
    job.ending = worst
    job.findings = _merged_findings(by_rank, bounding)
    job.notes = _merged_notes(by_rank, bounding)
    if straggler is not None:
        job.findings.insert(0, straggler_finding(straggler))
    joined = join_finding_of(by_rank)
    if joined is not None:
        job.findings.insert(0, joined)
    if world > 1 and not report.backend and any(r.steps.step_ms for r in by_rank):
        job.notes.insert(
            0,
            f"the {world} ranks never initialised torch.distributed (no init_process_group): "
            "each trained alone, on all of its data, with nothing shared between them",
        )
    buckets = bucket_finding(report, bounding.seen)
    if buckets is not None:
        job.findings.append(buckets)
    if ending is not None:
        job.ending = ending(job)
        job.status = job.ending.status
    summarise(job)  # the bounding rank's own figures; the job's verdict follows
    job.verdict = job_verdict(job, report)
    report.projection = project(job, LINKS[DEFAULT_LINK])
    return job


def find_straggler(ranks: list[RankRun]) -> Straggler | None:
    """The rank whose own work in a typical step is at least :data:`STRAGGLER_RATIO` times the
    others' median.

    Judged on medians of each rank's own work step by step, not on means: a straggler is slow
    step after step, while two slow steps of a balanced rank on a busy machine (a burst of other
    work, a late warm-up) move a mean of eight by half and leave its median where it was.
    """
    measured = [r for r in ranks if r.own_ms is not None and len(r.steps.step_ms) >= MIN_STEPS]
    if len(measured) < 2:
        return None
    samples = {id(r): own_samples(r, measured) for r in measured}
    typical = {id(r): statistics.median(samples[id(r)]) for r in measured}
    slow = max(measured, key=lambda r: typical[id(r)])
    others = [r for r in measured if r is not slow]
    median_own = statistics.median(typical[id(r)] for r in others)
    if typical[id(slow)] < STRAGGLER_RATIO * median_own or median_own <= 0:
        return None
    excess = typical[id(slow)] - median_own
    # A gap that costs the job little is no straggler (ranks sharing cores drift by a few %).
    job_step = max(r.step_ms.mean for r in measured if r.step_ms is not None)
    if excess < STRAGGLER_STEP_SHARE * job_step:
        return None
    # The gap must stand out of the noise too, judged against each rank's own spread.
    pooled = [v for r in others for v in samples[id(r)]]
    low, _ = interval(samples[id(slow)], pooled, statistic=statistics.median)
    if low < STRAGGLER_RATIO:
        return None
    slow.role = STRAGGLER
    for r in others:
        r.role = WAITS
    waits = [_wait_ms(r) for r in others]
    return Straggler(
        rank=slow.rank,
        part=_slowest_part(slow, others, excess),
        excess_ms=round(excess, 3),
        victims=[r.rank for r in others],
        wait_ms=round(sum(waits) / len(waits), 3),
    )


def job_verdict(job: RunRecord, report: DistributedReport) -> Verdict:
    """The job's verdict: the straggler's bottleneck, communication, or the ranks' shared one."""
    own = job.verdict
    if report.stragglers:
        s = report.stragglers[0]
        kind = part_bound(s.part)
        why = (
            f"rank {s.rank} is a straggler: it spends {s.excess_ms:.1f} ms per step more than the "
            f"other ranks on its own work, mostly {PART_WORDS.get(s.part, s.part)}, and every "
            f"other rank waits for it in the all-reduce ({s.wait_ms:.1f} ms per step)"
        )
        if own is not None and own.kind == kind:
            why += f"; on rank {s.rank}: {own.why}"
        return Verdict(kind, why, f"on rank {s.rank}: {_next_for(kind, job, own)}", _shares(job))
    share = comm_share(report)
    if share is not None and share >= COMM_BOUND_SHARE:
        # The job's step: the ranks step together, so the largest mean (the ceiling's too).
        step = max((r.step_ms.mean for r in report.ranks if r.step_ms), default=0.0)
        why = (
            f"the ranks spend {share * 100:.0f}% of a mean {step:.1f} ms step in "
            f"communication (or waiting in it)"
        )
        if report.no_sync_step_ms is not None and report.comm_ceiling is not None:
            why += (
                f"; with communication made free (no_sync) the step takes "
                f"{report.no_sync_step_ms:.1f} ms, a ceiling of {report.comm_ceiling:.2f}x"
            )
        # Communication sits inside backward (and forward): carved out of compute, so the
        # shares still sum to one.
        shares = _shares(job)
        shares["compute"] = round(max(shares.get("compute", 0.0) - share, 0.0), 4)
        shares["communication"] = round(share, 4)
        manual = any(r.collectives_ms for r in report.ranks) and "ddp_at" not in job.seen
        sharded = any(r.torch_collectives_ms for r in report.ranks)
        if sharded:
            why += f"; {issued_words(job.torch_collective_kinds)}"
        if sharded:
            next_ = sharded_next(job.seen)
        else:
            next_ = NEXT_MANUAL if manual else communication_next(job.seen)
        return Verdict(COMMUNICATION_BOUND, why, next_, shares)
    if own is None or not any(r.steps.step_ms for r in report.ranks):
        return Verdict(
            "UNKNOWN",
            "no rank measured a training step",
            own.next if own is not None else "see what each rank's notes say torchdoctor saw",
            {},
        )
    few = min(len(r.steps.step_ms) for r in report.ranks)
    if own.kind == "UNKNOWN" or few < MIN_STEPS:
        why = own.why if own.kind == "UNKNOWN" else (
            f"only {few} step{'' if few == 1 else 's'} measured on a rank before the job ended: "
            f"too few to compare the ranks or for a verdict ({MIN_STEPS} needed)"
        )  # fmt: skip
        return Verdict("UNKNOWN", why, own.next, own.shares)
    balanced = f"the {report.world_size} ranks are balanced"
    if report.skew_ms is not None:
        balanced += f" (own work differs by {report.skew_ms:.1f} ms per step)"
    return Verdict(own.kind, f"{balanced}; rank {job_rank(job)}: {own.why}", own.next, own.shares)


def job_rank(job: RunRecord) -> int:
    return job.distributed.bounding_rank if job.distributed is not None else rank_of(job)


# --- the pieces ------------------------------------------------------------------------------


def _rank_run(rec: RunRecord, ended: str, errors: dict[int, list[str]] | None) -> RankRun:
    env = rec.env
    return RankRun(
        rank=rank_of(rec),
        local_rank=env.local_rank if env is not None else 0,
        host=env.host if env is not None else "",
        status=rec.status,
        steps=rec.steps,
        step_ms=rec.step_ms,
        parts_ms=dict(rec.parts_ms),
        model_alone_step_ms=rec.model_alone_step_ms,
        no_sync=list(rec.no_sync),
        no_sync_step_ms=Stat.of(rec.no_sync),
        collectives_ms=round(statistics.fmean(rec.collectives), 4)
        if any(rec.collectives)
        else None,
        torch_collectives_ms=round(statistics.fmean(rec.torch_collectives), 4)
        if any(rec.torch_collectives)
        else None,
        verdict=rec.verdict,
        ended=ended,
        error=list((errors or {}).get(rank_of(rec), [])),
        stopped_at=rec.stopped_at,
        in_collective=rec.stopped_in_collective,
        goodput=rec.whole_run.goodput if rec.whole_run is not None else None,
        wall_s=rec.whole_run.wall_s if rec.whole_run is not None else None,
        whole_s=_kind_seconds(rec),
    )


def _kind_seconds(rec: RunRecord) -> dict[str, float]:
    out: dict[str, float] = {}
    for kind in rec.whole_run.categories if rec.whole_run is not None else []:
        out[kind.kind] = round(out.get(kind.kind, 0.0) + kind.seconds, 4)
    return out


def _own_work(ranks: list[RankRun]) -> None:
    """Each rank's own work and communication time per step (see the module's docstring)."""
    measured = [r for r in ranks if r.step_ms is not None]
    if measured and all(r.no_sync_step_ms is not None for r in measured):
        for r in measured:
            assert r.step_ms is not None and r.no_sync_step_ms is not None
            r.own_ms = round(r.no_sync_step_ms.mean, 3)
            r.comm_ms = round(max(r.step_ms.mean - r.no_sync_step_ms.mean, 0.0), 3)
        return
    if measured and all(_timed_comm(r) is not None for r in measured):
        # The collectives timed where they are called (the script's own, FSDP2's): the
        # communication the step waited for.
        for r in measured:
            assert r.step_ms is not None
            r.comm_ms = round(min(_timed_comm(r) or 0.0, r.step_ms.mean), 3)
            r.own_ms = round(r.step_ms.mean - r.comm_ms, 3)
        return
    # No communication-free steps: the wait shows as backward (and forward, with buffers) time
    # beyond the least any rank spends there.
    floor = (
        {p: min(_part(r, p) for r in measured) for p in ("forward", "backward")} if measured else {}
    )
    for r in measured:
        assert r.step_ms is not None
        wait = sum(_part(r, p) - floor[p] for p in floor)
        r.own_ms = round(r.step_ms.mean - wait, 3)


def _timed_comm(r: RankRun) -> float | None:
    """The rank's collectives timed where they were called, per step: the script's own and
    those torch's parallel code issued (None: no such call was timed)."""
    if r.collectives_ms is None and r.torch_collectives_ms is None:
        return None
    return (r.collectives_ms or 0.0) + (r.torch_collectives_ms or 0.0)


def own_samples(r: RankRun, ranks: list[RankRun]) -> list[float]:
    """The rank's own work step by step: its no-sync steps; without them each step less the
    forward and backward time beyond the least any rank spends there (as :func:`_own_work`)."""
    if r.no_sync:
        return list(r.no_sync)
    floor = sum(min(_part(o, p) for o in ranks) for p in ("forward", "backward"))
    forward, backward = r.steps.part("forward"), r.steps.part("backward")
    return [step - (f + b) + floor for step, f, b in zip(r.steps.step_ms, forward, backward)]


def _wait_ms(r: RankRun) -> float:
    if r.comm_ms is not None:
        return r.comm_ms
    return max((r.step_ms.mean if r.step_ms else 0.0) - (r.own_ms or 0.0), 0.0)


#: A part outside backward explains a straggler when it holds at least this share of its excess.
_PART_SHARE = 0.3


def _slowest_part(slow: RankRun, others: list[RankRun], excess_ms: float) -> str:
    """The part the straggler spends most over the others in; backward, where the others' wait
    sits too, when no other part holds a fair share of its excess."""
    excess = {
        p: _part(slow, p) - statistics.median(_part(o, p) for o in others)
        for p in STEP_PARTS
        if p != "backward"
    }
    part, ms = max(excess.items(), key=lambda kv: kv[1])
    return part if ms > 0 and ms >= _PART_SHARE * excess_ms else "backward"


def _comm_made_free(report: DistributedReport) -> None:
    ranks = [r for r in report.ranks if r.step_ms is not None and r.no_sync_step_ms is not None]
    if not ranks or len(ranks) != len([r for r in report.ranks if r.step_ms is not None]):
        return
    step = max(r.step_ms.mean for r in ranks if r.step_ms is not None)
    free = max(r.no_sync_step_ms.mean for r in ranks if r.no_sync_step_ms is not None)
    report.no_sync_step_ms = round(free, 3)
    if free > 0 and step > 0:
        report.comm_ceiling = round(step / free, 3)
        report.scaling_efficiency = round(min(free / step, 1.0), 3)


def _bounding(report: DistributedReport, by_rank: list[RunRecord]) -> int:
    ranks = {rank_of(r) for r in by_rank}
    return report.bounding_rank if report.bounding_rank in ranks else rank_of(by_rank[0])


def _part(r: RankRun, part: str) -> float:
    stat = r.parts_ms.get(part)
    return stat.mean if stat else 0.0


def _shares(job: RunRecord) -> dict[str, float]:
    return dict(job.verdict.shares) if job.verdict is not None else {}


def _next_for(kind: str, job: RunRecord, own: Verdict | None) -> str:
    if own is not None and own.kind == kind:
        return own.next
    if kind == INPUT_BOUND:
        return _next_input(job)
    return _NEXT_HOST if kind == HOST_BOUND else next_compute(job)


def worst_status(statuses: list[Status]) -> Status:
    """The job's status: complete only when every rank is; otherwise the worst ending
    (:data:`~torchdoctor.record.STATUS_PRECEDENCE`); a status this version does not know is
    partial's."""
    known = [s for s in statuses if s in STATUS_PRECEDENCE] or [COMPLETE]
    if len(known) < len(statuses) and all(s == COMPLETE for s in known):
        return PARTIAL
    return min(known, key=STATUS_PRECEDENCE.index)


def worst_ending(records: list[RunRecord]) -> Ending | None:
    """The worst of the ranks' endings, where every rank kept one (records written before the
    ending was kept have none)."""
    endings = [r.ending for r in records]
    if not endings or any(e is None or e.status != r.status for e, r in zip(endings, records)):
        return None
    return min((e for e in endings if e is not None), key=lambda e: e.precedence)


def _merged_findings(records: list[RunRecord], first: RunRecord) -> list[Finding]:
    """The bounding rank's findings, then those only other ranks made (with their rank)."""
    out = list(first.findings)
    seen = {(f.kind, f.file, f.line) for f in out}
    for rec in records:
        if rec is first:
            continue
        for f in rec.findings:
            key = (f.kind, f.file, f.line)
            if key in seen:
                continue
            seen.add(key)
            out.append(copy.deepcopy(f))
            out[-1].detail = {**f.detail, "rank": rank_of(rec)}
    return out


def _merged_notes(records: list[RunRecord], first: RunRecord) -> list[str]:
    out = list(first.notes)
    for rec in records:
        if rec is first:
            continue
        out.extend(f"rank {rank_of(rec)}: {n}" for n in rec.notes if n not in first.notes)
    return out
