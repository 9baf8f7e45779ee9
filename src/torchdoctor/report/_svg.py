"""Small inline SVG charts for the HTML report: stacked bars, horizontal bars, a line.

Plain SVG written here, not a plotting library: the page must open offline, weigh little and
make no request, and these three shapes are all it draws. Colours are CSS variables (the page
sets them for light and dark), so a chart follows the reader's colour scheme.
"""

from __future__ import annotations

from html import escape

#: CSS variable of each step part's colour (the page defines them).
PART_COLOURS = {
    "data_wait": "var(--c-data)",
    "to_device": "var(--c-copy)",
    "forward": "var(--c-fwd)",
    "backward": "var(--c-bwd)",
    "optimizer": "var(--c-opt)",
    "other": "var(--c-other)",
}
#: The same for the parts of a profiler trace's step (``analyze``).
TRACE_PART_COLOURS = {
    "gpu_kernels": "var(--c-fwd)",
    "memcpy": "var(--c-copy)",
    "memset": "var(--c-mem)",
    "communication": "var(--c-opt)",
    "runtime": "var(--c-bwd)",
    "dataloader": "var(--c-data)",
    "cpu_ops": "var(--c-cpu)",
    "other": "var(--c-other)",
}
#: Width of one legend entry, px: the longest label ("communication", 11 px) with its swatch.
_LEGEND_W = 118


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
    pad_left, pad_bottom = 48, 22
    plot_w, plot_h = width - pad_left - 8, height - pad_bottom - 8
    bar_w = plot_w / len(steps)
    out = [_open(width, height + 8 + 18 * legend_rows, "per-step parts")]
    out.append(_axis(pad_left, plot_h, top, "ms"))
    for i, step in enumerate(steps):
        y = plot_h + 4.0
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
    out.append(f'<text x="{pad_left}" y="{plot_h + 20}" class="axis">step 1 … {len(steps)}</text>')
    out.append(_legend(parts, pad_left, height + 14, per_row, colours, labels or {}))
    out.append("</svg>")
    return "".join(out)


def bars(rows: list[tuple[str, float, str]], unit: str, width: int = 760) -> str:
    """Horizontal bars: (label, value, css colour) per row, the value written at the bar's end."""
    rows = [r for r in rows if r[1] is not None]
    if not rows:
        return ""
    top = max(v for _, v, _ in rows) or 1.0
    label_w, row_h = 260, 24
    plot_w = width - label_w - 130
    out = [_open(width, row_h * len(rows) + 6, "bars")]
    for i, (label, value, colour) in enumerate(rows):
        y = i * row_h + 3
        w = max(plot_w * value / top, 1.0)
        out.append(f'<text x="0" y="{y + 15}" class="label">{escape(label)}</text>')
        out.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" '
            f'fill="{colour}"><title>{escape(label)}: {value:.2f} {escape(unit)}</title></rect>'
        )
        out.append(
            f'<text x="{label_w + w + 6:.1f}" y="{y + 15}" class="value">'
            f"{value:.2f} {escape(unit)}</text>"
        )
    out.append("</svg>")
    return "".join(out)


def line(
    points: list[tuple[float, float]],
    x_label: str,
    y_label: str,
    mark: float | None = None,
    width: int = 760,
    height: int = 220,
) -> str:
    """A line through (x, y) points, with a dot per point and the ``mark`` x highlighted."""
    if not points:
        return ""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    top = max(ys) or 1.0
    pad_left, pad_bottom = 48, 26
    plot_w, plot_h = width - pad_left - 16, height - pad_bottom - 8

    def at(x: float, y: float) -> tuple[float, float]:
        fx = (x - x0) / (x1 - x0) if x1 > x0 else 0.5
        return pad_left + fx * plot_w, 4 + plot_h - plot_h * y / top

    out = [_open(width, height, "line")]
    out.append(_axis(pad_left, plot_h, top, y_label))
    path = " ".join(f"{'M' if i == 0 else 'L'}{at(x, y)[0]:.1f},{at(x, y)[1]:.1f}"
                    for i, (x, y) in enumerate(points))  # fmt: skip
    out.append(f'<path d="{path}" fill="none" stroke="var(--c-fwd)" stroke-width="2"/>')
    for x, y in points:
        cx, cy = at(x, y)
        cls = "pick" if mark is not None and x == mark else "dot"
        out.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{5 if cls == "pick" else 3}" class="{cls}">'
            f"<title>{escape(x_label)} {x:g}: {y:.1f} {escape(y_label)}</title></circle>"
        )
        out.append(f'<text x="{cx - 4:.1f}" y="{plot_h + 22}" class="axis">{x:g}</text>')
    out.append(
        f'<text x="{width - 16}" y="{plot_h + 22}" class="axis" text-anchor="end">'
        f"{escape(x_label)}</text>"
    )
    out.append("</svg>")
    return "".join(out)


def _open(width: int, height: int, role: str) -> str:
    return (
        f'<svg viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{escape(role)}" class="chart">'
    )


def _axis(x: int, plot_h: float, top: float, unit: str) -> str:
    return (
        f'<line x1="{x}" y1="4" x2="{x}" y2="{plot_h + 4:.1f}" class="grid"/>'
        f'<text x="{x - 6}" y="12" class="axis" text-anchor="end">{top:.1f}</text>'
        f'<text x="{x - 6}" y="{plot_h + 4:.1f}" class="axis" text-anchor="end">0</text>'
        f'<text x="{x + 6}" y="12" class="axis">{escape(unit)}</text>'
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
        label = labels.get(part, part.replace("_", " "))
        out.append(
            f'<rect x="{px}" y="{py - 9}" width="10" height="10" '
            f'fill="{colours.get(part, "gray")}"/>'
            f'<text x="{px + 14}" y="{py}" class="axis">{escape(label)}</text>'
        )
    return "".join(out)
