"""``torchdoctor compare``: the judgement in the terminal, and as a page with both records."""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.compare import Comparison, Judgement, WholeChange
from ..record import JUDGEMENT_TONES, RunRecord, write_text_atomic
from ._style import BAD, GOOD
from .html import page, record_body
from .terminal import command_words

#: Each judgement's style in the terminal, from its tone.
_LOOK = {
    kind: {"good": GOOD, "bad": BAD}.get(tone, "bold") for kind, tone in JUDGEMENT_TONES.items()
}


def headline(c: Comparison) -> str:
    """``IMPROVED 4.81x [4.52-5.10] (mean step 56.4 -> 11.7 ms)``."""
    unit = "samples/s" if c.measure == "samples/s" else "mean step"
    return (
        f"{c.kind} {c.judged.figure()} "
        f"({unit}; mean step {c.a_step_ms:.1f} -> {c.b_step_ms:.1f} ms over {c.a_steps} and "
        f"{c.b_steps} steps)"
    )


def whole_headline(w: WholeChange) -> str:
    """``whole run: IMPROVED 1.58x (wall 12.8 -> 8.1 s; goodput 29% -> 62%)``."""
    return (
        f"whole run: {w.kind} {w.speedup:.2f}x (wall {w.a_wall_s:.1f} -> {w.b_wall_s:.1f} s; "
        f"goodput {w.a_goodput:.0%} -> {w.b_goodput:.0%})"
    )


def warning(c: Comparison) -> str | None:
    """What the judgement must be read with, first: the records are not like for like."""
    if c.like_for_like:
        return None
    return (
        "not a like-for-like comparison: "
        + "; ".join(c.differences)
        + ". The speedup below compares different work, not a change to one script"
    )


def render_comparison(c: Comparison, console: Console | None = None) -> None:
    console = console or Console()
    caution = warning(c)
    if caution:
        console.print(Text(f"warning: {caution}", style=BAD))
    console.print(Text(headline(c), style=_LOOK.get(c.kind, "bold") if not caution else "bold"))
    for diff in c.differences if not caution else []:
        console.print(Text(f"note: {diff}", style="dim"))
    if c.a_verdict or c.b_verdict:
        console.print(f"verdict: {c.a_verdict or '?'} -> {c.b_verdict or '?'}")
    if c.parts:
        table = Table(title="per part (mean ms per step)", title_justify="left")
        table.add_column("part")
        table.add_column("A", justify="right")
        table.add_column("B", justify="right")
        table.add_column("change", justify="right")
        for p in c.parts:
            table.add_row(p.part, f"{p.a_ms:.2f}", f"{p.b_ms:.2f}", f"{p.change_ms:+.2f}")
        console.print(table)
    if c.whole is not None:
        console.print(Text(whole_headline(c.whole), style=_LOOK.get(c.whole.kind, "bold")))
        table = Table(title="the whole run, by kind (seconds)", title_justify="left")
        for name in ("kind", "A", "B", "change"):
            table.add_column(name, justify="left" if name == "kind" else "right")
        for kind, x, y in c.whole.kinds:
            table.add_row(kind, f"{x:.2f}", f"{y:.2f}", f"{y - x:+.2f}")
        console.print(table)
        if c.whole.note:
            console.print(Text(f"note: {c.whole.note}", style="dim"))
    for note in c.notes:
        console.print(Text(f"note: {note}", style="dim"))


def comparison_html(c: Comparison, a: RunRecord, b: RunRecord) -> str:
    cls = c.judged.tone
    rows = _part_rows(c)
    caution = warning(c)
    if caution:
        cls = "bad"
    lead = f"<p class='bad'>{escape(caution)}</p>" if caution else ""
    said = [] if caution else list(c.differences)
    notes = "".join(f"<p class='muted'>{escape(n)}</p>" for n in [*said, *c.notes])
    body = (
        "<h1>torchdoctor compare</h1>"
        f'<section id="judgement" class="card">{lead}<div class="kind {cls}">'
        f"{escape(c.kind)}</div>"
        f"<p>{escape(headline(c))}</p><p>verdict: {escape(c.a_verdict)} → "
        f"{escape(c.b_verdict)}</p>{notes}</section>"
        + (
            "<section id='parts'><h2>Per part (mean ms per step)</h2><table><tr><th>part</th>"
            f"<th class='n'>A</th><th class='n'>B</th><th class='n'>change</th></tr>{rows}"
            "</table></section>"
            if rows
            else ""
        )
        + _whole_html(c)
        + f"<div id='a'>{record_body(a, 'A: ' + command_words(a), level=2)}</div>"
        + f"<div id='b'>{record_body(b, 'B: ' + command_words(b), level=2)}</div>"
    )
    return page("compare", body)


def _part_rows(c: Comparison) -> str:
    return "".join(
        f"<tr><td>{escape(p.part)}</td><td class='n'>{p.a_ms:.2f}</td>"
        f"<td class='n'>{p.b_ms:.2f}</td><td class='n'>{p.change_ms:+.2f}</td></tr>"
        for p in c.parts
    )


def _whole_html(c: Comparison) -> str:
    w = c.whole
    if w is None:
        return ""
    rows = "".join(
        f"<tr><td>{escape(k)}</td><td class='n'>{x:.2f}</td><td class='n'>{y:.2f}</td>"
        f"<td class='n'>{y - x:+.2f}</td></tr>"
        for k, x, y in w.kinds
    )
    note = f"<p class='muted'>{escape(w.note)}</p>" if w.note else ""
    return (
        f"<section id='whole'><h2>The whole run</h2><p>{escape(whole_headline(w))}</p>{note}"
        "<table><tr><th>kind</th><th class='n'>A, s</th><th class='n'>B, s</th>"
        f"<th class='n'>change</th></tr>{rows}</table></section>"
    )


def demo_html(c: Comparison, side: Judgement | None, a: RunRecord, b: RunRecord) -> str:
    """The demo's page: the speedup measured side by side first, then both diagnoses. The two
    are different scripts on purpose (the fixed pipeline is the point), so the records'
    comparison gives only its per-part table, never its judgement or its warning."""
    if side is not None:
        cls, kind = side.judged.tone, side.kind
        said = (
            f"{side.judged.figure('–', '()')}: the fixed pipeline against the script as written, "
            "measured side by side (runs of each alternated, so load that comes and goes falls on "
            "both)"
        )
    else:
        cls, kind, said = "", "NOT MEASURED", "a side-by-side run failed: no speedup measured"
    notes = "".join(f"<p class='muted'>{escape(n)}</p>" for n in (side.notes if side else []))
    rows = _part_rows(c)
    body = (
        "<h1>torchdoctor demo</h1>"
        f'<section id="judgement" class="card"><div class="kind {cls}">{escape(kind)}</div>'
        f"<p>{escape(said)}</p><p>verdict: {escape(c.a_verdict)} → {escape(c.b_verdict)}</p>"
        f"{notes}</section>"
        + (
            "<section id='parts'><h2>Per part, from the two diagnoses (mean ms per step)</h2>"
            "<table><tr><th>part</th><th class='n'>before</th><th class='n'>after</th>"
            f"<th class='n'>change</th></tr>{rows}</table></section>"
            if rows
            else ""
        )
        + f"<div id='a'>{record_body(a, 'before: the script as written', level=2)}</div>"
        + f"<div id='b'>{record_body(b, 'after: the fixed pipeline', level=2)}</div>"
    )
    return page("demo", body)


def write_demo_html(
    c: Comparison,
    side: Judgement | None,
    a: RunRecord,
    b: RunRecord,
    path: str | os.PathLike[str],
) -> Path:
    return write_text_atomic(path, demo_html(c, side, a, b))


def write_comparison_html(
    c: Comparison, a: RunRecord, b: RunRecord, path: str | os.PathLike[str]
) -> Path:
    return write_text_atomic(path, comparison_html(c, a, b))
