"""The course of a whole run and of a job's (``run --whole``): a run cut short projected, the
step drifting and memory creeping over the run, a model trained in eval mode, and rank 0's saves
that the other ranks of a job wait for. Pure, on the record."""

from __future__ import annotations

import statistics

from ..record import Finding, RunRecord, WholeBlock, WholeKind, WholeRun

#: Drift: the step rising by this much from the run's first third to its last, over this many
#: blocks at least ...
DRIFT_RISE = 0.10
DRIFT_BLOCKS = 6
#: ... and over this many seconds of the run at least.
DRIFT_SPAN_S = 60.0
#: Memory creep: resident memory rising by this share and this many MiB (over any span).
CREEP_RISE, CREEP_MB = 0.20, 200.0


def mark_cut(run: WholeRun) -> None:
    """A run ended before the script did (the bound, a signal, a kill): the goodput of a long
    one, the startup paid once and the rest as observed."""
    run.ending = "cut"
    body = run.wall_s - run.seconds_of("startup") - run.seconds_of("tail")
    if run.steps < 3 or body <= 0:
        return
    run.projected_goodput = round(run.seconds_of("steps") / body, 4)
    if run.epochs:
        run.projection = (
            f"the run was cut after {run.wall_s:.0f} s and {run.epochs} epoch(s): a long run is "
            "assumed to repeat what was seen (its epochs with their boundaries, evaluations and "
            "saves at the same intervals), the startup paid once"
        )
    else:
        run.projection = (
            f"the run was cut after {run.wall_s:.0f} s, before an epoch ended: a long run is "
            "assumed to go on as observed, so epoch boundaries and end-of-epoch evaluations or "
            "saves, not yet seen, are missing from it (an upper bound)"
        )


def course_findings(blocks: list[WholeBlock]) -> list[Finding]:
    """Step time drifting up over the run (over a minute at least: a shorter one's trend may be
    a loaded machine's noise), memory creeping up (however fast: load moves no memory)."""
    body = blocks[1:]
    if len(body) < DRIFT_BLOCKS:
        return []
    third = max(len(body) // 3, 1)
    first, last = body[:third], body[-third:]
    findings = []
    before = statistics.median(b.step_ms for b in first)
    after = statistics.median(b.step_ms for b in last)
    long_enough = body[-1].end_s - body[0].end_s >= DRIFT_SPAN_S
    if long_enough and before > 0 and after / before - 1 >= DRIFT_RISE:
        findings.append(
            Finding(
                kind="whole.drift",
                title=f"the step slowed by {after / before - 1:.0%} over the run "
                f"({before:.1f} ms early, {after:.1f} ms late)",
                fix="look for what grows with the run: a list kept of every loss (keep floats, "
                "or .detach()), a cache, a Python object per step, a learning-rate schedule "
                "that changes the work",
                severity="warning",
                detail={"early_ms": round(before, 3), "late_ms": round(after, 3)},
            )
        )
    creep = _memory_creep(body)
    if creep is not None:
        findings.append(creep)
    return findings


def _memory_creep(body: list[WholeBlock]) -> Finding | None:
    """The process's memory rising from the run's first third to its last, with its rate (MB a
    step, between the lowest early block and the highest late one) and when the host's memory
    still available at the last block would run out at that pace."""
    read = [b for b in body if b.rss_mb is not None]
    if len(read) < DRIFT_BLOCKS:
        return None
    third = len(read) // 3
    low = min(read[:third], key=lambda b: b.rss_mb or 0.0)
    high = max(read[-third:], key=lambda b: b.rss_mb or 0.0)
    low_mb, high_mb = low.rss_mb or 0.0, high.rss_mb or 0.0
    if high_mb - low_mb < CREEP_MB or high_mb / max(low_mb, 1.0) - 1 < CREEP_RISE:
        return None
    steps = sum(b.steps for b in body if low.end_s < b.end_s <= high.end_s)
    seconds = high.end_s - low.end_s
    detail: dict = {"early_mb": round(low_mb, 1), "late_mb": round(high_mb, 1)}
    title = f"the process's memory grew from {low_mb:.0f} MiB to {high_mb:.0f} MiB over the run"
    if steps and seconds > 0:
        per_step = (high_mb - low_mb) / steps
        detail["mb_per_step"] = round(per_step, 3)
        title += f" ({per_step:.2f} MiB a step)"
        free = read[-1].free_mb
        if free is not None:
            left_s = free / ((high_mb - low_mb) / seconds)
            detail["seconds_to_exhaustion"] = round(left_s, 1)
            title += (
                f"; at this pace the {free / 1024:.1f} GiB the host still had run out in about "
                f"{_hours(left_s)}"
            )
    return Finding(
        kind="whole.memory-creep",
        title=title,
        fix="keep losses and metrics as Python floats (loss.item()) rather than tensors, and "
        "clear per-step caches; torchdoctor run (its watched steps) names a list that keeps "
        "tensors or graphs at its line",
        severity="warning",
        detail=detail,
    )


def _hours(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


# --- a job -------------------------------------------------------------------------------------


def share_saves(records: list[RunRecord]) -> None:
    """A save on rank 0 that the other ranks wait for is their checkpoint time too.

    On another rank of the same machine, the excess of a slow step spent while rank 0 was saving
    (its collective waited for rank 0) moves from ``slow-steps`` to ``checkpoint``; the events
    line up on the machine's monotonic clock.
    """
    zero = next((r for r in records if _rank(r) == 0 and r.whole_run is not None), None)
    if zero is None or zero.whole_run is None or zero.whole_run.started_at_s is None:
        return
    base = zero.whole_run.started_at_s
    saves = [
        (base + e.start_s, base + e.start_s + e.seconds)
        for e in zero.whole_run.events
        if e.kind == "checkpoint"
    ]
    host = zero.env.host if zero.env is not None else ""
    for record in records:
        run = record.whole_run
        if record is zero or run is None or run.started_at_s is None or not saves:
            continue
        if (record.env.host if record.env is not None else "") != host:
            continue  # another machine's clock
        _share_saves(run, saves)


def _share_saves(run: WholeRun, saves: list[tuple[float, float]]) -> None:
    moved = 0.0
    for event in run.events:
        if event.kind != "slow-steps":
            continue
        start = run.started_at_s + event.start_s  # type: ignore[operator]
        end = start + event.seconds
        overlap = sum(max(0.0, min(end, b) - max(start, a)) for a, b in saves)
        if overlap > 0.5 * event.seconds:
            event.kind = "checkpoint"
            moved += event.seconds
    if moved <= 0:
        return
    slow = next(k for k in run.categories if k.kind == "slow-steps")
    slow.seconds = round(max(slow.seconds - moved, 0.0), 4)
    checkpoint = next((k for k in run.categories if k.kind == "checkpoint"), None)
    if checkpoint is None:
        checkpoint = WholeKind("checkpoint", 0.0)
        run.categories.insert(run.categories.index(slow) + 1, checkpoint)
    checkpoint.seconds = round(checkpoint.seconds + moved, 4)
    words = f"{moved:.2f} s waiting in collectives while rank 0 saved"
    checkpoint.detail = f"{checkpoint.detail}; {words}" if checkpoint.detail else words
    checkpoint.fix = checkpoint.fix or (
        "the other ranks wait for rank 0's save: save asynchronously "
        "(torch.distributed.checkpoint.async_save) or less often"
    )


def _rank(record: RunRecord) -> int:
    return record.env.rank if record.env is not None else 0


def eval_mode_finding(where: str | None) -> Finding:
    """Steps that trained with the model in eval mode (``model.train()`` forgotten)."""
    return Finding(
        kind="whole.eval-mode-training",
        title="training steps run with the model in eval mode: after an evaluation, "
        "model.train() is not called again",
        fix="call model.train() when the evaluation ends (dropout and batch norm train "
        "as in evaluation until then)",
        file=(where or ":").rpartition(":")[0] or None,
        severity="critical",
    )
