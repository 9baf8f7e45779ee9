"""Terminal rendering of a trace analysis (``record.trace``) with rich.

:func:`render_trace_section` draws only the trace-specific tables, for a general record
renderer to call; :func:`render_trace_report` draws a whole ``torchdoctor analyze`` report
(verdict, trace tables, findings, notes).
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..record import RankReport, RunRecord, TraceReport
from ._style import severity_look, verdict_look
from ._words import TRACE_PART_LABELS, ms_text, trace_headline

#: Step wall times listed under the step table, per rank.
MAX_STEPS_LISTED = 12


def render_trace_section(record: RunRecord, console: Console) -> None:
    """Draw the trace tables of ``record`` (no-op when the record holds no trace analysis)."""
    trace = record.trace
    if trace is None or not trace.analysed:
        return
    ranks = trace.ranks
    _step_table(ranks, console)
    _gpu_table(ranks, trace, console)
    _top_kernels(ranks, console)
    _comm_and_skew(ranks, trace, console)


def _step_table(ranks: list[RankReport], console: Console) -> None:
    console.print(
        Text("Step time, claimed in priority order (parts sum to the step)", style="bold")
    )
    table = Table(show_edge=False)
    table.add_column("part")
    for r in ranks:
        steps = r.analysed_steps
        table.add_column(f"{r.label}\nms/step ({steps} steps)", justify="right")
        table.add_column("share", justify="right")
    for part, label in TRACE_PART_LABELS.items():
        row = [label]
        for r in ranks:
            steps = max(1, r.analysed_steps)
            row += [ms_text(r.step_parts_ms[part] / steps), f"{100 * r.step_shares[part]:.1f}%"]
        table.add_row(*row)
    total = ["wall time"]
    for r in ranks:
        total += [ms_text(r.step_wall_ms / max(1, r.analysed_steps)), "100%"]
    table.add_row(*total, style="bold")
    console.print(table)
    for r in ranks:
        shown = r.steps[:MAX_STEPS_LISTED]
        listed = ", ".join(
            f"{s.name.replace('ProfilerStep', '')} {ms_text(s.wall_ms)}" for s in shown
        )
        more = f", ... ({len(r.steps)} in all)" if len(r.steps) > len(shown) else ""
        left_out = len(r.steps) - r.analysed_steps
        tail = f"; the last {left_out} not in the totals" if left_out else ""
        console.print(Text(f"steps of {r.label} (ms): {listed}{more}{tail}", style="dim"))
    console.print()


def _gpu_table(ranks: list[RankReport], trace: TraceReport, console: Console) -> None:
    with_gpu = [r for r in ranks if r.temporal]
    if not with_gpu:
        console.print("GPU: the trace holds no GPU activity (a CPU-only profile).")
        console.print()
        return
    last = "kept" if trace.include_last_step else "left out"
    console.print(
        Text(
            f"GPU time over the kernel span (HTA's definitions; last ProfilerStep {last}); "
            "idle split into host wait / kernel wait / other",
            style="bold",
        )
    )
    table = Table(show_edge=False)
    for col in ("rank", "span ms", "idle", "compute", "non-compute", "host", "kernel", "other"):
        table.add_column(col, justify="right" if col != "rank" else "left")
    for r in with_gpu:
        tp, idle = r.temporal, r.idle
        assert tp is not None
        split = (
            [f"{idle.share_pct[c]:.1f}%" for c in ("host_wait", "kernel_wait", "other")]
            if idle
            else ["-"] * 3
        )
        table.add_row(
            r.label,
            ms_text(tp.kernel_span_us / 1000.0),
            f"{tp.idle_pct:.2f}%",
            f"{tp.compute_pct:.2f}%",
            f"{tp.non_compute_pct:.2f}%",
            *split,
        )
    console.print(table)
    console.print()


def _top_kernels(ranks: list[RankReport], console: Console) -> None:
    r = max(ranks, key=lambda x: sum(k.total_ms for k in x.top_kernels) if x.top_kernels else 0)
    if not r.top_kernels:
        return
    console.print(Text(f"Top kernels ({r.label}, whole trace)", style="bold"))
    table = Table(show_edge=False)
    table.add_column("kernel", overflow="ellipsis", max_width=36, no_wrap=True)
    for col in ("calls", "total ms", "mean us", "share"):
        table.add_column(col, justify="right", no_wrap=True, min_width=7)
    for k in r.top_kernels[:5]:
        table.add_row(
            k.name,
            str(k.count),
            ms_text(k.total_ms),
            f"{k.mean_us:,.0f}" if k.mean_us >= 100 else f"{k.mean_us:.1f}",
            f"{k.share_pct:.1f}%",
        )
    console.print(table)
    console.print()


def _comm_and_skew(ranks: list[RankReport], trace: TraceReport, console: Console) -> None:
    for r in ranks:
        comm = r.comm
        if comm:
            console.print(
                f"Communication ({r.label}): {ms_text(comm.comm_ms)} ms of NCCL kernels, "
                f"{comm.overlap_pct:.1f}% overlapped with computation, "
                f"{comm.exposed_pct:.1f}% of the GPU span exposed"
            )
    skew = trace.skew
    if skew and skew.own_ms:
        per_rank = ", ".join(
            f"{k} {ms_text(v)} (exposed communication {ms_text(skew.exposed_comm_ms.get(k, 0.0))})"
            for k, v in skew.own_ms.items()
        )
        if skew.straggler:
            waiting = ", ".join(skew.waiting)
            verb = "waits" if len(skew.waiting) == 1 else "wait"
            said = (
                f"{skew.straggler_rank} is a straggler; {waiting} {verb} "
                f"{ms_text(skew.wait_ms)} ms per step for it"
            )
        else:
            said = "no straggler"
        console.print(
            f"Per-rank own work per step, ms (step less exposed communication): {per_rank}; {said}"
        )
    elif skew:  # a record from before own work was measured
        medians = ", ".join(f"{k} {v:.1f} ms" for k, v in skew.median_step_ms.items())
        console.print(
            f"Per-rank median step: {medians}; skew {100 * skew.skew:.1f}%"
            + (" (straggler)" if skew.straggler else "")
        )
    if any(r.comm for r in ranks) or skew:
        console.print()


def render_trace_report(record: RunRecord, console: Console | None = None) -> None:
    """Draw the whole ``torchdoctor analyze`` report for ``record``."""
    console = console or Console()
    trace = record.trace or TraceReport()
    parse = trace.parse
    console.print(Text(f"torchdoctor analyze: {trace_headline(record)}", style="bold"))
    if parse and parse.seconds:
        console.print(
            Text(f"parsed {parse.mb:.1f} MB of JSON in {parse.seconds:.2f} s", style="dim")
        )
    console.print()
    v = record.verdict
    if v:
        console.print(Text.assemble("VERDICT: ", verdict_look(v.kind)))
        console.print(f"  Why:  {v.why}")
        console.print(f"  Next: {v.next}")
        console.print()
    render_trace_section(record, console)
    if record.findings:
        console.print(Text("Findings", style="bold"))
        for f in record.findings:
            where = f" [{f.file}:{f.line}]" if f.file else ""
            severity = severity_look(f.severity)
            console.print(
                Text.assemble((f"  {severity.label:<7} ", severity.style), f"{f.title}{where}")
            )
            console.print(Text(f"          fix: {f.fix}", style="dim"))
        console.print()
    for note in record.notes:
        console.print(Text(f"note: {note}", style="dim"))
