"""The HTML report: one self-contained page from a record (docs/report.md).

Everything is inline: CSS with a light and a dark palette (``prefers-color-scheme``), charts as
SVG drawn by :mod:`._svg`, no script, no font, no image file. A Content-Security-Policy of
``default-src 'none'`` lets the browser load nothing else, so the page opens offline and makes
no request. It reads the record and nothing live, like the terminal report.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from ..analysis.verdict import ceiling_words
from ..record import COMPLETE, STEP_PARTS, RunRecord, write_text_atomic
from ..record.part_names import parts_shown
from . import _style, _svg
from ._style import ending_look, verdict_look
from ._words import (
    AS_RUN,
    MODEL_ALONE,
    NO_SYNC,
    command_words,
    environment_rows,
    firm_words,
    part_header,
    part_label,
    projection_lines,
    rank_label,
    role_words,
    share_words,
    trace_headline,
    waiting_words,
)
from .patch_html import patch_section
from .terminal import ending_words, stop_line  # how a run ended: the endings' words
from .trace_html import trace_section, trace_steps
from .whole_run_html import whole_run_section

#: The page's style: the palette (light and dark) and the verdicts' colours from the one table
#: the terminal and the charts use (``_style``), then the layout, which names colours only by
#: their variables.
_CSS = (
    _style.page_palette_css()
    + """body { background:var(--bg); color:var(--fg); font:15px/1.45 system-ui, sans-serif;
  margin:0 auto; max-width:1100px; padding:16px 20px 40px; }
h1 { font-size:20px; margin:0 0 4px; } h2 { font-size:16px; margin:26px 0 8px; }
.muted { color:var(--muted); } code, pre { font:13px/1.4 ui-monospace, monospace; }
pre { background:var(--card); padding:8px 10px; border-radius:6px; overflow-x:auto; }
#findings pre, #ranks pre, #notes pre { white-space:pre-wrap; overflow-wrap:anywhere; }
.card.ended { border-left:6px solid var(--warn); } .card.ended-bad { border-left-color:var(--bad); }
.warn { color:var(--warn); font-weight:600; } .kind.ending + p { margin-top:2px; }
section { border-top:1px solid var(--line); }
.card { background:var(--card); border-radius:8px; padding:12px 16px; }
.kind { font-weight:700; font-size:18px; }
table { border-collapse:collapse; width:100%; font-size:14px; }
th, td { text-align:left; padding:4px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
table.trials td { overflow-wrap:anywhere; } table.trials td.j { min-width:16em; }
table.trials tr.more td { border-bottom:none; padding-top:0; }
table.trials pre { white-space:pre-wrap; overflow-wrap:anywhere; margin:4px 0; }
.good { color:var(--good); font-weight:600; } .bad { color:var(--bad); font-weight:600; }
svg.chart { display:block; max-width:100%; }
svg .axis { fill:var(--muted); font-size:11px; } svg .label, svg .value { fill:var(--fg);
  font-size:12px; } svg .grid { stroke:var(--line); } svg .dot { fill:var(--c-fwd); }
svg .pick { fill:var(--good); }
pre.diff .add { color:var(--good); } pre.diff .del { color:var(--bad); }
pre.diff .hd { color:var(--muted); font-weight:600; }
"""
)
_CSP = "default-src 'none'; style-src 'unsafe-inline'"


def render_html(record: RunRecord, title: str | None = None) -> str:
    """The whole page for ``record``."""
    heading = title or command_words(record) or "run"
    return page(heading, record_body(record, heading))


def page(title: str, body: str) -> str:
    """A self-contained page around ``body``."""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>torchdoctor: {escape(title)}</title><style>{_CSS}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def record_body(record: RunRecord, heading: str, level: int = 1) -> str:
    """Every section of one record (``level`` 2 when it sits inside a comparison)."""
    analysis = record.is_trace_analysis
    said = f"a profiler trace: {trace_headline(record)}" if analysis else stop_line(record)
    body = [
        f"<h{level}>torchdoctor: {escape(heading)}</h{level}>",
        f'<p class="muted" id="headline">{escape(said)}</p>',
        whole_run_section(record),
        _verdict(record),
    ]
    for section in (
        trace_steps(record) if analysis else _steps(record),
        _counterfactuals(record),
        _ranks(record),
        _trials(record),
        _sweep(record),
        _transforms(record),
        _memory(record),
        trace_section(record),
        _findings(record),
        _environment(record),
        _notes(record),
        patch_section(record),
    ):
        if section:
            body.append(section)
    return "".join(body)


def write_html(record: RunRecord, path: str | os.PathLike[str], title: str | None = None) -> Path:
    """Write the page atomically; returns its path."""
    return write_text_atomic(path, render_html(record, title))


# --- sections ----------------------------------------------------------------------------------


def _section(ident: str, title: str, inner: str) -> str:
    return f'<section id="{ident}"><h2>{escape(title)}</h2>{inner}</section>'


def _verdict(record: RunRecord) -> str:
    v = record.verdict
    if v is None:
        return ""
    shares = " · ".join(escape(words) for words in share_words(v))
    ceiling = (
        f"<p>Ceiling: {escape(ceiling_words(record))}</p>"
        if record.ceiling_speedup is not None
        else ""
    )
    ending = ending_look(record.status) if not record.is_trace_analysis else None
    first = ""
    card = "card"
    if ending is not None:  # how the run ended comes first, in the verdict's place and colour
        tone = "bad" if "red" in ending.style else "warn"
        card = f"card ended ended-{tone}"
        first = (
            f'<div class="kind ending {tone}" id="ending">{escape(ending.label)}</div>'
            f'<p class="{tone}">{escape(ending_words(record))}</p><p><b>Verdict</b> '
        )
        kind = f'<span class="{escape(v.kind)}">{escape(v.kind)}</span></p>'
    else:
        kind = f'<div class="kind {escape(v.kind)}">{escape(v.kind)}</div>'
    doubt = firm_words(v)
    if doubt:
        kind += f'<p class="warn" id="not-firm">{escape(doubt)}</p>'
    return (
        f'<section id="verdict" class="{card}">{first}{kind}'
        f"<p><b>Why</b> {escape(v.why)}</p>"
        f"<p><b>Next</b> {escape(v.next)}</p>"
        + (f'<p class="muted">{shares}</p>' if shares else "")
        + ceiling
        + "</section>"
    )


def _steps(record: RunRecord) -> str:
    series = record.steps
    if not series.step_ms:
        return ""
    steps = [
        {p: series.part(p)[i] if i < len(series.part(p)) else 0.0 for p in STEP_PARTS}
        for i in range(len(series))
    ]
    rows = "".join(
        f"<tr><td>{escape(part_label(p))}</td><td class='n'>{s.mean:.2f}</td>"
        f"<td class='n'>{s.median:.2f}</td><td class='n'>{s.p90:.2f}</td></tr>"
        for p, s in record.parts_ms.items()
    )
    table = (
        "<table><tr><th>part</th><th class='n'>mean ms</th><th class='n'>median</th>"
        f"<th class='n'>p90</th></tr>{rows}</table>"
    )
    title = f"Every measured step ({len(series)}), by part"
    if record.distributed is not None:
        title += f" (rank {record.distributed.bounding_rank})"
    shown = parts_shown([record.parts_ms])
    return _section("steps", title, _svg.stacked_steps(steps, shown) + table)


def _counterfactuals(record: RunRecord) -> str:
    if record.step_ms is None:
        return ""
    rows = [(AS_RUN, record.step_ms.mean, _style.FORWARD.css)]
    if record.model_alone_step_ms is not None:
        rows.append((MODEL_ALONE, record.model_alone_step_ms.mean, _style.FREED.css))
    d = record.distributed
    if d is not None and d.no_sync_step_ms is not None:
        rows.append((NO_SYNC, d.no_sync_step_ms, _style.OPTIMIZER.css))
    if len(rows) == 1:
        return ""
    return _section("counterfactuals", "Counterfactuals (mean step)", _svg.bars(rows, "ms"))


def _ranks(record: RunRecord) -> str:
    d = record.distributed
    if d is None:
        return ""
    shown = parts_shown(r.parts_ms for r in d.ranks)
    head = "".join(f"<th class='n'>{escape(part_header(p))}</th>" for p in shown)
    rows = []
    for r in d.ranks:
        parts = "".join(
            f"<td class='n'>{r.parts_ms[p].mean:.2f}</td>" if p in r.parts_ms else "<td></td>"
            for p in shown
        )
        rows.append(
            f"<tr><td>{escape(rank_label(r, d))}</td><td>{escape(r.status)}</td>"
            f"<td class='n'>{r.step_ms.mean if r.step_ms else 0:.2f}</td>{parts}"
            f"<td class='n'>{_num(r.no_sync_step_ms.mean if r.no_sync_step_ms else None)}</td>"
            f"<td class='n'>{_num(r.comm_ms)}</td>"
            f"<td class='n'>{_num(r.own_ms)}</td>"
            f"<td class='{'bad' if r.role == 'straggler' else ''}'>"
            f"{escape(role_words(r, d))}</td>"
            f"<td class='{escape(r.verdict.kind) if r.verdict else ''}'>"
            f"{escape(verdict_look(r.verdict.kind).label) if r.verdict else '-'}</td></tr>"
        )
    lines = [
        f"<p>{d.world_size} ranks on {d.nnodes} node(s), backend {escape(d.backend or '?')}</p>"
    ]
    for s in d.stragglers:
        lines.append(
            f"<p class='bad'>rank {s.rank} is a straggler: {s.excess_ms:.1f} ms more own work per "
            f"step (mostly {escape(s.part.replace('_', ' '))}); rank(s) "
            f"{', '.join(map(str, s.victims))} wait {s.wait_ms:.1f} ms per step</p>"
        )
    if d.comm_ceiling is not None:
        lines.append(f"<p>communication made free: {d.comm_ceiling:.2f}x ceiling</p>")
    lines.extend(f"<p>{escape(line)}</p>" for line in projection_lines(d))
    for r in d.ranks:
        if r.ended and r.status != COMPLETE:  # as the terminal says it
            lines.append(f"<p class='bad'>rank {r.rank}: {escape(r.ended)}</p>")
        if r.stopped_at:
            lines.append(
                f"<p>rank {r.rank}: when stopped, at <code>{escape(r.stopped_at)}</code>"
                f"{escape(waiting_words(r))}</p>"
            )
    for r in d.ranks:
        if r.error:
            lines.append(f"<p>rank {r.rank} raised:</p><pre>{escape(''.join(r.error[-15:]))}</pre>")
    table = (
        f"<table><tr><th>{'rank (host:local)' if d.nnodes > 1 else 'rank'}</th><th>status</th>"
        f"<th class='n'>step</th>{head}<th class='n'>no-sync</th><th class='n'>comm/wait</th>"
        f"<th class='n'>own work</th><th>role</th>"
        "<th>own verdict</th></tr>"
        f"{''.join(rows)}</table>"
    )
    return _section("ranks", "Ranks of the job (mean ms per step)", "".join(lines) + table)


def _trial_detail(t) -> str:
    """Under a trial's row what the terminal says under it: why it could not tell, compile time,
    graph breaks, the settings tried, the code to paste and its caveats."""
    from .trials import (
        compile_line,
        graph_break_lines,
        memory_line,
        paste_title,
        points_line,
        unclear_line,
    )

    if t.status != "measured":
        return ""
    parts = []
    unclear = unclear_line(t)
    if unclear:
        parts.append(f"<p>{escape(unclear)}</p>")
    compiled = compile_line(t)
    if compiled:
        parts.append(f"<p class='muted'>{escape(compiled)}</p>")
    parts.extend(f"<p class='bad'>{escape(line)}</p>" for line in graph_break_lines(t))
    points = points_line(t)
    if points:
        parts.append(f"<p class='muted'>{escape(points)}</p>")
    memory = memory_line(t)
    if memory:
        parts.append(f"<p>{escape(memory)}</p>")
    title = paste_title(t)
    if title:
        parts.append(f"<p class='good'>{escape(title)}</p><pre>{escape(t.code)}</pre>")
        parts.extend(f"<p class='muted'>caveat: {escape(c)}</p>" for c in t.caveats)
    return "".join(parts)


def _trials(record: RunRecord) -> str:
    if not record.trials and record.flops is None:
        return ""
    out = []
    if record.flops is not None:
        from .trials import flops_line

        out.append(f"<p>{escape(flops_line(record.flops).plain)}</p>")
    if record.trials:
        from .trials import trial_word

        rows = []
        for t in record.trials:
            judged = t.judged if t.status == "measured" else None
            spread = t.judged.interval_words("–") if t.judged is not None else ""
            word = t.status if t.status != "measured" else trial_word(t)
            cls = "bad" if t.status == "failed" else judged.tone if judged is not None else ""
            said = f"{word}: {t.reason}" if t.reason else word
            speedup = t.judged.speedup if t.judged is not None else None
            rows.append(
                f"<tr><td>{escape(t.name)}</td><td>{escape(t.changed)}</td>"
                f"<td class='n'>{_num(speedup, 'x')}</td><td class='n'>{spread}</td>"
                f"<td class='j {cls}'>{escape(said)}</td></tr>"
            )
            more = _trial_detail(t)
            if more:
                rows.append(f"<tr class='more'><td></td><td colspan='4'>{more}</td></tr>")
        out.append(
            "<table class='trials'><tr><th>trial</th><th>changed</th><th class='n'>speedup</th>"
            "<th class='n'>90% interval</th><th>judgement</th></tr>"
            f"{''.join(rows)}</table>"
        )
    return _section("trials", "Trials and FLOPs", "".join(out))


def _sweep(record: RunRecord) -> str:
    sweep = record.loader_report.worker_sweep if record.loader_report else None
    if sweep is None or not sweep.points:
        return ""
    # One line per main-process thread count (a CPU model's sweep searches both), one pick.
    series: dict[str, list[tuple[float, float]]] = {}
    for p in sweep.points:
        name = f"{p.threads} torch threads" if p.threads is not None else ""
        series.setdefault(name, []).append((float(p.num_workers), p.batches_per_s))
    best = sweep.point(sweep.best_workers, sweep.best_threads)
    pick = None
    said = f"pick {sweep.best_workers} workers"
    if best is not None:
        pick = (
            f"{best.threads} torch threads" if best.threads is not None else "",
            float(best.num_workers),
        )
        if best.threads is not None:
            said += f" with {best.threads} torch threads"
    chart = _svg.line(series, "num_workers", "batches/s", mark=pick)
    return _section("sweep", f"num_workers sweep ({sweep.measures}; {said})", chart)


def _transforms(record: RunRecord) -> str:
    costs = record.loader_report.transforms if record.loader_report else []
    if not costs:
        return ""
    rows = [(c.name, c.ms_per_batch, _style.DATA.css) for c in costs[:12]]
    return _section("transforms", "Time to make a batch", _svg.bars(rows, "ms/batch"))


def _memory(record: RunRecord) -> str:
    rows = []
    if record.system is not None:
        rows.append(("main process RSS (max)", record.system.main_rss_mb_max, _style.FORWARD.css))
        if record.system.workers:
            rows.append(("workers RSS (max)", record.system.workers_rss_mb_max, _style.DATA.css))
        if record.system.gpu_mem_mb_max is not None:
            rows.append(("device memory (max)", record.system.gpu_mem_mb_max, _style.BACKWARD.css))
    mem = record.loader_report.memory if record.loader_report else None
    if mem is not None:
        rows.append(("batches in flight", mem.bytes_in_flight / 2**20, _style.COPY.css))
    return _section("memory", "Memory", _svg.bars(rows, "MiB")) if rows else ""


def _findings(record: RunRecord) -> str:
    if not record.findings:
        return ""
    items = []
    for f in record.findings:
        where = f" <code>{escape(f.file)}:{f.line}</code>" if f.file else ""
        source = f"<pre>{escape(f.source)}</pre>" if f.source else ""
        items.append(
            f"<li><b>[{escape(f.severity)}]</b> {escape(f.title)}{where}{source}"
            f"<div>fix:</div><pre>{escape(f.fix)}</pre></li>"
        )
    return _section("findings", "Findings", f"<ol>{''.join(items)}</ol>")


def _environment(record: RunRecord) -> str:
    rows = environment_rows(record)
    if not rows:
        return ""
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return _section("environment", "Environment", f"<table>{body}</table>")


def _notes(record: RunRecord) -> str:
    if not record.notes:
        return ""
    items = "".join(f"<li>{escape(n)}</li>" for n in record.notes)
    return _section("notes", "Notes", f"<ul class='muted'>{items}</ul>")


def _num(value: float | None, unit: str = "") -> str:
    return "" if value is None else f"{value:.2f}{unit}"
