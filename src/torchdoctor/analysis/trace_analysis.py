"""The facade: parsed traces in, one :class:`~torchdoctor.record.RunRecord` out.

Each analysis is its own module (trace_gpu, trace_steps, trace_host, trace_comm,
trace_verdict); this one runs them per rank and gathers the results in a
:class:`~torchdoctor.record.TraceReport` (``record.trace``), so the record renders and
serialises like a ``run`` record.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import statistics
from typing import Any

from .. import __version__
from ..record import (
    COMPLETE,
    Finding,
    ParseStats,
    RankReport,
    RunRecord,
    Stat,
    TraceReport,
    TraceStep,
)
from ..trace import RankTrace
from . import trace_comm, trace_gpu, trace_host, trace_steps, trace_verdict


def analyse_rank(t: RankTrace, n_step_names: int, include_last_step: bool = False) -> RankReport:
    """Every per-rank analysis of one trace."""
    view = trace_gpu.gpu_view(t, n_step_names, include_last_step)
    temporal = trace_gpu.temporal_breakdown(t, view)
    steps = trace_steps.step_breakdown(t, include_last_step)
    analysed = steps.steps[: steps.analysed_steps]
    window = (analysed[0].start_us, analysed[-1].end_us) if analysed else None
    devices = t.metadata.get("deviceProperties") or []
    return RankReport(
        label=t.label,
        rank=t.rank,
        world_size=t.world_size,
        path=t.path,
        events=len(t),
        device=(devices[0].get("name") if devices and isinstance(devices[0], dict) else None),
        has_gpu=bool(view.ts) or temporal is not None,
        steps=[
            TraceStep(name=w.name, wall_ms=w.wall_us / 1000.0, parts_ms=parts)
            for w, parts in zip(steps.steps, steps.per_step_ms, strict=True)
        ],
        analysed_steps=steps.analysed_steps,
        step_parts_ms=steps.total_ms,
        step_wall_ms=steps.wall_ms,
        step_shares={p: steps.share(p) for p in trace_steps.STEP_PARTS},
        temporal=temporal,
        idle=trace_gpu.idle_breakdown(t, view),
        syncs=trace_host.sync_report(t, window),
        pageable_memcpy=trace_host.pageable_copies(t),
        launch=trace_host.launch_stats(t),
        top_kernels=trace_host.top_kernels(t),
        dataloader_share=steps.share("dataloader"),
        comm=trace_comm.comm_overlap(t, view),
        notes=[*t.notes, *steps.notes],
        parse=ParseStats(mb=t.uncompressed_bytes / 1e6, seconds=t.parse_seconds),
    )


def analyze_parsed_traces(
    traces: list[RankTrace], command: list[str] | None = None, include_last_step: bool = False
) -> RunRecord:
    """Analyse one trace per rank and return the record with verdict and findings.

    Args:
        traces: parsed traces (from :func:`torchdoctor.trace.load_trace`), one per rank.
        command: the command line to store in the record.
        include_last_step: keep the last ProfilerStep (HTA leaves it out by default).

    Returns:
        A :class:`RunRecord` whose ``trace`` holds the breakdowns per rank.
    """
    n_step_names = len(trace_gpu.step_names(traces))
    ranks = [analyse_rank(t, n_step_names, include_last_step) for t in traces]
    return _record(ranks, command, include_last_step)


def _record(
    ranks: list[RankReport], command: list[str] | None, include_last_step: bool
) -> RunRecord:
    """The record of the ranks' analyses: the job's skew, verdict and findings."""
    notes: list[str] = []
    seen_ranks: set[int] = set()
    for r in ranks:
        if r.rank is None:
            notes.append(
                f"{r.path}: no distributedInfo.rank in the trace; shown as {r.label} "
                "(HTA would call it rank 0)"
            )
        elif r.rank in seen_ranks:
            notes.append(f"{r.path}: rank {r.rank} appears in more than one file")
        else:
            seen_ranks.add(r.rank)
        notes.extend(r.notes)
    skew = trace_comm.rank_skew(ranks)
    verdict = trace_verdict.verdict(ranks, skew)
    findings: list[Finding] = trace_verdict.findings(ranks, skew)
    first = ranks[0] if ranks else None
    step_ms = [s.wall_ms for s in first.steps[: first.analysed_steps]] if first else []
    record = RunRecord(
        tool_version=__version__,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=list(command or []),
        status=COMPLETE,
        notes=notes,
        verdict=verdict,
        findings=findings,
        step_ms=Stat.of(step_ms),
    )
    record.steps.step_ms = step_ms
    record.trace = TraceReport(
        files=[r.path for r in ranks],
        ranks=ranks,
        skew=skew,
        include_last_step=include_last_step,
        thresholds=trace_verdict.thresholds(),
        verdict=dataclasses.replace(verdict, shares=dict(verdict.shares)),
        parse=ParseStats(
            mb=sum(r.parse.mb for r in ranks if r.parse is not None),
            seconds=sum(r.parse.seconds for r in ranks if r.parse is not None),
        ),
    )
    if first and len(ranks) > 1:
        record.notes.append(
            f"step times shown for {first.label}; per-rank figures are in the trace section"
        )
    if step_ms:
        record.seen["profiler_steps"] = len(first.steps)
    record.seen["ranks"] = len(ranks)
    record.seen["median_step_ms"] = statistics.median(step_ms) if step_ms else None
    return record


def analyze_trace(
    paths: list[str] | str,
    include_last_step: bool = False,
    command: list[str] | None = None,
    jobs: int | None = None,
) -> RunRecord:
    """Parse trace files or directories (one file per rank) and analyse them.

    Args:
        paths: ``.json`` / ``.json.gz`` trace files, or directories holding them.
        include_last_step: keep the last ProfilerStep (HTA leaves it out by default).
        command: the command line to store in the record.
        jobs: worker processes for a folder of rank files (default: one per usable core, as
            the memory available allows; :mod:`~torchdoctor.analysis.trace_ranks`).

    Returns:
        The analysed :class:`RunRecord` (verdict, findings, ``trace``).

    A truncated or non-trace file beside readable ones (a folder of rank files) is skipped and
    named with its reason in the record's notes; the rest are analysed.

    Raises:
        TraceFormatError: for a missing path, or when no file given is a readable trace.
    """
    from ..trace import TraceFormatError, find_trace_files
    from .trace_ranks import analyse_files
    from .trace_ranks import jobs as worker_count

    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs={jobs!r}: expected a number of processes, 1 or more, or None")
    files = [str(f) for f in find_trace_files([paths] if isinstance(paths, str) else list(paths))]
    # ``jobs=1``: no process but this one (a large file is then read in one part too)
    results, _ = analyse_files(
        files, include_last_step, worker_count(files, jobs), split=None if jobs != 1 else False
    )
    ranks = [r.report for r in results if r.report is not None]
    skipped = [TraceFormatError(*r.error) for r in results if r.error is not None]
    if not ranks:
        raise skipped[0]
    record = _record(ranks, command, include_last_step)
    record.notes[:0] = [f"skipped {exc.message} (the other files are analysed)" for exc in skipped]
    record.notes.extend(r.note for r in results if r.note)
    return record


def attach_trace(record: RunRecord, paths: list[str] | list[Any]) -> RunRecord:
    """Analyse the traces a run recorded and add the results to the run's own record.

    The run keeps its verdict (it measured more than a trace shows); the trace's verdict goes
    to ``record.trace.verdict``, its findings are appended and its notes kept. The files the
    run recorded (``record.trace.recorded_files``) are kept.

    Args:
        record: the record of ``torchdoctor run``.
        paths: the trace files (``StepProfiler.trace_paths``) or their directory.

    Returns:
        ``record``, changed in place.
    """
    # in the run's own process, no workers: a run's traces are a few steps
    traced = analyze_trace([str(p) for p in paths], jobs=1)
    recorded = record.trace.recorded_files if record.trace is not None else []
    record.trace = traced.trace
    if record.trace is not None:
        record.trace.recorded_files = recorded
    record.findings.extend(traced.findings)
    record.notes.extend(f"trace: {n}" for n in traced.notes)
    return record
