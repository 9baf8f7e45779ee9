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
#: Memory creep: resident memory rising by this share and this many MB.
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
    """Step time drifting up over the run, memory creeping up."""
    body = blocks[1:]
    if len(body) < DRIFT_BLOCKS or body[-1].end_s - body[0].end_s < DRIFT_SPAN_S:
        return []  # too short a run to tell a trend from a loaded machine's noise
    third = max(len(body) // 3, 1)
    first, last = body[:third], body[-third:]
    findings = []
    before = statistics.median(b.step_ms for b in first)
    after = statistics.median(b.step_ms for b in last)
    if before > 0 and after / before - 1 >= DRIFT_RISE:
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
    rss = [b.rss_mb for b in body if b.rss_mb is not None]
    if len(rss) >= DRIFT_BLOCKS:
        low, high = min(rss[: len(rss) // 3]), max(rss[-(len(rss) // 3) :])
        if high - low >= CREEP_MB and high / max(low, 1.0) - 1 >= CREEP_RISE:
            findings.append(
                Finding(
                    kind="whole.memory-creep",
                    title=f"the process's memory grew from {low:.0f} MB to {high:.0f} MB over "
                    "the run",
                    fix="keep losses and metrics as Python floats (loss.item()) rather than "
                    "tensors, and clear per-step caches",
                    severity="warning",
                    detail={"early_mb": round(low, 1), "late_mb": round(high, 1)},
                )
            )
    return findings


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
