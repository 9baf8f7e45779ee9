"""The sections of the HTML page that show a profiler trace (``analyze``, ``run --trace``).

An ``analyze`` record ran no script: its steps are the trace's ProfilerSteps and their parts the
trace's own (GPU kernels, runtime, CPU ops...), the ones the terminal's step table shows. The
page draws them from ``record.trace``, never as the parts of a run's step.
"""

from __future__ import annotations

from html import escape

from ..record import RankReport, RunRecord
from . import _svg
from ._words import TRACE_PART_LABELS, ms_text


def _section(ident: str, title: str, inner: str) -> str:
    return f'<section id="{ident}"><h2>{escape(title)}</h2>{inner}</section>'


def trace_steps(record: RunRecord) -> str:
    """The first rank's analysed ProfilerSteps, one stacked bar each, and its part table."""
    trace = record.trace
    if trace is None or not trace.ranks:
        return ""
    rank = trace.ranks[0]
    analysed = rank.steps[: rank.analysed_steps]
    if not analysed:
        return ""
    parts = tuple(TRACE_PART_LABELS)
    chart = _svg.stacked_steps(
        [dict(s.parts_ms) for s in analysed], parts, colours=_svg.TRACE_PART_COLOURS
    )
    steps = max(1, rank.analysed_steps)
    rows = "".join(
        f"<tr><td>{escape(label)}</td>"
        f"<td class='n'>{ms_text(rank.step_parts_ms.get(part, 0.0) / steps)}</td>"
        f"<td class='n'>{100 * rank.step_shares.get(part, 0.0):.1f}%</td></tr>"
        for part, label in TRACE_PART_LABELS.items()
    )
    rows += (
        f"<tr><th>wall time</th><th class='n'>{ms_text(rank.step_wall_ms / steps)}</th>"
        "<th class='n'>100%</th></tr>"
    )
    table = (
        f"<table><tr><th>part</th><th class='n'>mean ms per step</th>"
        f"<th class='n'>share</th></tr>{rows}</table>"
    )
    left_out = len(rank.steps) - rank.analysed_steps
    tail = f"; the last {left_out} not in the totals" if left_out else ""
    listed = ", ".join(
        f"{s.name.replace('ProfilerStep', '')} {ms_text(s.wall_ms)}" for s in rank.steps
    )
    note = f"<p class='muted'>steps of {escape(rank.label)} (ms): {escape(listed)}{tail}</p>"
    title = f"Every analysed ProfilerStep ({len(analysed)}) of {rank.label}, by part"
    return _section("steps", title, chart + table + note)


def _gpu_cells(r: RankReport) -> str:
    tp = r.temporal
    if tp is None:
        return "<td class='n'></td><td class='n'></td>"
    return f"<td class='n'>{tp.idle_pct:.1f}%</td><td class='n'>{tp.compute_pct:.1f}%</td>"


def trace_section(record: RunRecord) -> str:
    """Each rank's mean step, GPU idle and compute, and shares of the step."""
    trace = record.trace
    if trace is None or not trace.analysed:
        return ""
    rows = "".join(
        f"<tr><td>{escape(r.label)}</td>"
        f"<td class='n'>{ms_text(r.step_wall_ms / max(1, r.analysed_steps))}</td>{_gpu_cells(r)}"
        f"<td>{escape(', '.join(f'{k} {v * 100:.0f}%' for k, v in r.step_shares.items()))}</td>"
        "</tr>"
        for r in trace.ranks
    )
    files = escape(", ".join(trace.files))
    return _section(
        "trace",
        "Profiler trace",
        f"<p class='muted'>{files}</p><table><tr><th>rank</th><th class='n'>mean step ms</th>"
        f"<th class='n'>GPU idle</th><th class='n'>GPU compute</th>"
        f"<th>shares of the step</th></tr>{rows}</table>",
    )
