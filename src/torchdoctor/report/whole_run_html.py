"""``run --whole`` on the HTML page: the goodput, one bar of the run by kind, the run's timeline
(what happened when, over its steps) and its step time over the run, then the kinds and fixes."""

from __future__ import annotations

from html import escape

from ..record import RunRecord, WholeRun
from ._style import WHOLE_KINDS, whole_kind_look
from .whole_run import (
    cost_words,
    duration,
    goodput_words,
    ranks_words,
    saving_words,
    where_words,
)

WIDTH, PAD_LEFT, PAD_RIGHT = 760, 56, 24


def whole_run_section(record: RunRecord) -> str:
    """The section of ``record.whole_run`` (empty without one)."""
    run = record.whole_run
    if run is None:
        return ""
    lines = "".join(
        f"<p class='{'kind' if i == 0 else 'muted'}'>{escape(line)}</p>"
        for i, line in enumerate(goodput_words(run))
    )
    cost = cost_words(record)
    ranks = ranks_words(record)
    lines += f"<p>{escape(ranks)}</p>" if ranks else ""
    return (
        f'<section id="whole-run"><h2>The whole run: where its {duration(run.wall_s)} went</h2>'
        f"{lines}{share_bar(run)}{timeline(run)}{series(run)}{_table(run)}{_fixes(run)}"
        + (f"<p class='muted'>{escape(cost)}</p>" if cost else "")
        + "</section>"
    )


def _totals(run: WholeRun) -> dict[str, float]:
    totals: dict[str, float] = {}
    for kind in run.categories:
        totals[kind.kind] = totals.get(kind.kind, 0.0) + kind.seconds
    return totals


def share_bar(run: WholeRun) -> str:
    """The run as one bar, a segment per kind, with a legend."""
    totals = _totals(run)
    wall = max(run.wall_s, 1e-9)
    plot = WIDTH - PAD_LEFT - PAD_RIGHT
    kinds = [k for k in WHOLE_KINDS if totals.get(k)]
    out = [_open(44 + 16 * ((len(kinds) + 4) // 5), "the run's wall time by kind")]
    x = float(PAD_LEFT)
    for name, seconds in totals.items():
        w = plot * seconds / wall
        if w <= 0:
            continue
        colour, words = whole_kind_look(name)[1], whole_kind_look(name)[2]
        out.append(
            f'<rect class="kind-{escape(name)}" x="{x:.1f}" y="4" width="{w:.1f}" height="22" '
            f'fill="{colour}"><title>{escape(words)}: {seconds:.2f} s, {seconds / wall:.1%}'
            "</title></rect>"
        )
        x += w
    out.append(_legend(kinds, 44))
    out.append("</svg>")
    return "".join(out)


def timeline(run: WholeRun) -> str:
    """What happened when: the steps as one lane, each event a span of its kind's colour."""
    if not run.events:
        return ""
    wall = max(run.wall_s, 1e-9)
    plot = WIDTH - PAD_LEFT - PAD_RIGHT

    def x(t: float) -> float:
        return PAD_LEFT + plot * min(max(t, 0.0), wall) / wall

    out = [_open(70, "the run's timeline")]
    out.append(
        f'<rect x="{PAD_LEFT}" y="8" width="{plot}" height="26" '
        f'fill="{whole_kind_look("steps")[1]}" opacity="0.35"><title>training steps</title></rect>'
    )
    # spans that hold others (a boundary with the evaluation and save in it, the tail) first
    holders = ("startup", "tail", "epoch-boundary")
    ordered = sorted(run.events, key=lambda e: e.kind not in holders)
    for event in ordered:
        _, colour, words = whole_kind_look(event.kind)
        start, end = x(event.start_s), x(event.start_s + event.seconds)
        out.append(
            f'<rect class="event kind-{escape(event.kind)}" x="{start:.1f}" y="8" '
            f'width="{max(end - start, 1.0):.1f}" height="26" fill="{colour}">'
            f"<title>{escape(words)} at {event.start_s:.1f} s: {event.seconds:.2f} s</title></rect>"
        )
    out.append(_time_ticks(wall, 50))
    out.append("</svg>")
    more = (
        f"<p class='muted'>{run.events_dropped} later events are counted, not drawn.</p>"
        if run.events_dropped
        else ""
    )
    return "".join(out) + more


def series(run: WholeRun) -> str:
    """The median step of each stretch of the run over time."""
    points = [(b.end_s, b.step_ms) for b in run.series]
    if len(points) < 2:
        return ""
    wall = max(run.wall_s, 1e-9)
    top = 1.1 * max(ms for _, ms in points) or 1.0
    plot_w, plot_h, y0 = WIDTH - PAD_LEFT - PAD_RIGHT, 120, 20

    def at(t: float, ms: float) -> tuple[float, float]:
        return PAD_LEFT + plot_w * t / wall, y0 + plot_h - plot_h * ms / top

    path = " ".join(
        f"{'M' if i == 0 else 'L'}{at(t, ms)[0]:.1f},{at(t, ms)[1]:.1f}"
        for i, (t, ms) in enumerate(points)
    )
    colour = whole_kind_look("steps")[1]
    return (
        _open(y0 + plot_h + 40, "the step time over the run")
        + f'<text x="{PAD_LEFT}" y="12" class="axis">median step, ms</text>'
        + f'<line x1="{PAD_LEFT}" y1="{y0}" x2="{PAD_LEFT}" y2="{y0 + plot_h}" class="grid"/>'
        + f'<text x="{PAD_LEFT - 6}" y="{y0 + 4}" class="axis" text-anchor="end">{top:.1f}</text>'
        + f'<text x="{PAD_LEFT - 6}" y="{y0 + plot_h}" class="axis" text-anchor="end">0</text>'
        + f'<path class="series" d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
        + _time_ticks(wall, y0 + plot_h + 16)
        + "</svg>"
    )


def _table(run: WholeRun) -> str:
    wall = max(run.wall_s, 1e-9)
    rows = []
    for kind in run.categories:
        _, colour, words = whole_kind_look(kind.kind)
        what = where_words(kind)
        rows.append(
            f"<tr><td><span style='color:{colour}'>■</span> {escape(words)}</td>"
            f"<td class='n'>{kind.seconds:.2f}</td><td class='n'>{kind.seconds / wall:.1%}</td>"
            f"<td class='n'>{kind.count or ''}</td><td>{escape(what)}</td></tr>"
        )
    return (
        "<table class='whole'><tr><th>kind</th><th class='n'>seconds</th><th class='n'>share</th>"
        f"<th class='n'>count</th><th>where, what</th></tr>{''.join(rows)}</table>"
    )


def _fixes(run: WholeRun) -> str:
    items = [
        f"<li><code>{escape(k.fix)}</code>"
        + (
            f" <span class='muted'>({escape(saving_words(k, run.wall_s))})</span>"
            if k.saves_s
            else ""
        )
        + "</li>"
        for k in sorted(
            (k for k in run.categories if k.fix), key=lambda k: k.saves_s or 0.0, reverse=True
        )
    ]
    return f"<h3>What to change</h3><ul class='fixes'>{''.join(items)}</ul>" if items else ""


def _open(height: int, label: str) -> str:
    return (
        f'<svg viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        f'aria-label="{escape(label)}" class="chart">'
    )


def _legend(kinds: list[str], y: int) -> str:
    out = []
    for i, name in enumerate(kinds):
        _, colour, words = whole_kind_look(name)
        px, py = PAD_LEFT + (i % 5) * 136, y + (i // 5) * 16
        out.append(
            f'<rect x="{px}" y="{py - 9}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{px + 14}" y="{py}" class="axis">{escape(words)}</text>'
        )
    return "".join(out)


def _time_ticks(wall: float, y: float) -> str:
    """Five ticks of the run's time under a chart."""
    plot = WIDTH - PAD_LEFT - PAD_RIGHT
    out = []
    for i in range(5):
        t = wall * i / 4
        out.append(
            f'<text x="{PAD_LEFT + plot * i / 4:.1f}" y="{y}" class="axis" '
            f'text-anchor="middle">{duration(t)}</text>'
        )
    return "".join(out)
