"""Small inline SVG charts for the HTML report: stacked bars, horizontal bars, a line.

Plain SVG written here, not a plotting library: the page must open offline, weigh little and
make no request, and these three shapes are all it draws. Colours are CSS variables (the page
sets them for light and dark), so a chart follows the reader's colour scheme; which variable
each part takes is :mod:`._style`'s table, the terminal's too.
"""

from __future__ import annotations

from html import escape

from . import _style
from ._words import legend_label

#: CSS variable of each step part's colour (the page defines them from the same table).
PART_COLOURS = {part: colour.css for part, colour in _style.PART_COLOURS.items()}
#: The same for the parts of a profiler trace's step (``analyze``).
TRACE_PART_COLOURS = {part: colour.css for part, colour in _style.TRACE_PART_COLOURS.items()}
#: Width of one legend entry, px: the longest label ("communication", 11 px) with its swatch.
_LEGEND_W = 118


#: Room above a chart's plot for its unit, px (the unit sits on the axis, over no bar).
_TOP = 20
#: Width of a character of the 12 px label font, px, taken wide so that an estimate never
#: understates a label (DejaVu Sans averages 7 px at 12 px).
_CHAR_W = 7.5


def stacked_steps(
    steps: list[dict[str, float]],
    parts: tuple[str, ...],
    width: int = 760,
    height: int = 220,
    colours: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> str:
    """One stacked bar per step (its parts, in ms), every step shown, with a legend."""
    if not steps:
        return ""
    colours = colours or PART_COLOURS
    per_row = max(1, (width - 48) // _LEGEND_W)
    legend_rows = -(-len(parts) // per_row)
    top = max(sum(s.get(p, 0.0) for p in parts) for s in steps) or 1.0
    pad_left, pad_bottom = 56, 22
    plot_w, plot_h = width - pad_left - 8, height - pad_bottom - _TOP
    bar_w = plot_w / len(steps)
    out = [_open(width, height + 8 + 18 * legend_rows, "per-step parts")]
    out.append(_axis(pad_left, plot_h, top, "ms"))
    for i, step in enumerate(steps):
        y = _TOP + plot_h
        x = pad_left + i * bar_w
        for part in parts:
            ms = step.get(part, 0.0)
            h = plot_h * ms / top
            if h <= 0:
                continue
            y -= h
            out.append(
                f'<rect x="{x + 0.5:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 0.5):.1f}" '
                f'height="{h:.1f}" fill="{colours.get(part, "gray")}">'
                f"<title>step {i + 1}: {escape(part)} {ms:.2f} ms</title></rect>"
            )
    out.append(
        f'<text x="{pad_left}" y="{_TOP + plot_h + 16}" class="axis">step 1 … {len(steps)}</text>'
    )
    out.append(_legend(parts, pad_left, height + 14, per_row, colours, labels or {}))
    out.append("</svg>")
    return "".join(out)


def bars(rows: list[tuple[str, float, str]], unit: str, width: int = 760) -> str:
    """Horizontal bars: (label, value, css colour) per row, the value written at the bar's end.

    A label longer than its column is cut with an ellipsis (the whole of it in the tooltip), so
    that it never runs into its bar or its value.
    """
    rows = [r for r in rows if r[1] is not None]
    if not rows:
        return ""
    top = max(v for _, v, _ in rows) or 1.0
    label_w, row_h = 260, 24
    values = [f"{v:.2f} {unit}" for _, v, _ in rows]
    value_w = max(len(v) for v in values) * _CHAR_W + 8
    plot_w = width - label_w - value_w
    out = [_open(width, row_h * len(rows) + 6, "bars")]
    for i, (label, value, colour) in enumerate(rows):
        y = i * row_h + 3
        w = max(plot_w * value / top, 1.0)
        shown = fit(label, label_w - 10)
        out.append(
            f'<text x="2" y="{y + 15}" class="label">{escape(shown)}'
            f"<title>{escape(label)}</title></text>"
        )
        out.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" '
            f'fill="{colour}"><title>{escape(label)}: {values[i]}</title></rect>'
        )
        out.append(
            f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" class="value">{escape(values[i])}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def fit(label: str, room_px: float) -> str:
    """``label``, cut with an ellipsis to what ``room_px`` holds at the label font."""
    most = max(int(room_px / _CHAR_W), 2)
    return label if len(label) <= most else label[: most - 1].rstrip() + "…"


#: Colours of the lines of a chart with several (one per thread setting).
LINE_COLOURS = tuple(colour.css for colour in _style.LINE_COLOURS)


def line(
    series: dict[str, list[tuple[float, float]]],
    x_label: str,
    y_label: str,
    mark: tuple[str, float] | None = None,
    width: int = 760,
    height: int = 220,
) -> str:
    """One line per series (name -> (x, y) points), a dot per point, and the one ``mark``
    (series name, x) drawn as the pick. With several series a legend names them."""
    series = {name: sorted(points) for name, points in series.items() if points}
    if not series:
        return ""
    xs = sorted({x for points in series.values() for x, _ in points})
    x0, x1 = xs[0], xs[-1]
    # 8% of headroom: a dot at the highest value stays clear of the unit above the axis.
    top = 1.08 * max(y for points in series.values() for _, y in points) or 1.0
    pad_left, pad_right = 56, 24
    plot_w, plot_h = width - pad_left - pad_right, height - _TOP - 44
    legend = len(series) > 1

    def at(x: float, y: float) -> tuple[float, float]:
        fx = (x - x0) / (x1 - x0) if x1 > x0 else 0.5
        return pad_left + fx * plot_w, _TOP + plot_h - plot_h * y / top

    out = [_open(width, height + (18 if legend else 0), "line")]
    out.append(_axis(pad_left, plot_h, top, y_label))
    for x in xs:  # one tick per measured x, centred under it
        out.append(
            f'<text x="{at(x, 0)[0]:.1f}" y="{_TOP + plot_h + 16}" class="axis" '
            f'text-anchor="middle">{x:g}</text>'
        )
    # The axis title on its own row under the ticks, so that it never meets the last one.
    out.append(
        f'<text x="{pad_left + plot_w / 2:.1f}" y="{_TOP + plot_h + 34}" class="axis" '
        f'text-anchor="middle">{escape(x_label)}</text>'
    )
    for k, (name, points) in enumerate(series.items()):
        colour = LINE_COLOURS[k % len(LINE_COLOURS)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{at(x, y)[0]:.1f},{at(x, y)[1]:.1f}"
                        for i, (x, y) in enumerate(points))  # fmt: skip
        out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in points:
            cx, cy = at(x, y)
            pick = mark is not None and mark == (name, x)
            what = f"{name}, " if name else ""
            look = 'class="pick"' if pick else f'class="dot" style="fill:{colour}"'
            out.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{5 if pick else 3}" {look}>'
                f"<title>{escape(what)}{escape(x_label)} {x:g}: {y:.1f} {escape(y_label)}"
                f"{' (the pick)' if pick else ''}</title></circle>"
            )
        if legend:
            lx, ly = pad_left + k * 150, height + 8
            out.append(
                f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>'
                f'<text x="{lx + 14}" y="{ly}" class="axis">{escape(name)}</text>'
            )
    out.append("</svg>")
    return "".join(out)


def _open(width: int, height: int, role: str) -> str:
    return (
        f'<svg viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{escape(role)}" class="chart">'
    )


def _axis(x: int, plot_h: float, top: float, unit: str) -> str:
    """The value axis: its line, its top and zero ticks, and its unit above it."""
    return (
        f'<line x1="{x}" y1="{_TOP}" x2="{x}" y2="{_TOP + plot_h:.1f}" class="grid"/>'
        f'<text x="{x - 6}" y="{_TOP + 4}" class="axis" text-anchor="end">{top:.1f}</text>'
        f'<text x="{x - 6}" y="{_TOP + plot_h:.1f}" class="axis" text-anchor="end">0</text>'
        f'<text x="{x}" y="{_TOP - 8}" class="axis">{escape(unit)}</text>'
    )


def _legend(
    parts: tuple[str, ...],
    x: int,
    y: int,
    per_row: int,
    colours: dict[str, str],
    labels: dict[str, str],
) -> str:
    """A swatch and a name per part, ``per_row`` to a row so that none runs off the chart."""
    out = []
    for i, part in enumerate(parts):
        px, py = x + (i % per_row) * _LEGEND_W, y + (i // per_row) * 18
        label = labels.get(part) or legend_label(part, int((_LEGEND_W - 14) / _CHAR_W))
        out.append(
            f'<rect x="{px}" y="{py - 9}" width="10" height="10" '
            f'fill="{colours.get(part, "gray")}"/>'
            f'<text x="{px + 14}" y="{py}" class="axis">{escape(label)}</text>'
        )
    return "".join(out)
