"""``run --whole`` in the terminal: where every second of the run went, by kind, and what to change."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..record import RunRecord, WholeKind, WholeRun
from ._style import whole_kind_look

BAR_WIDTH = 60


def whole_run_section(record: RunRecord) -> RenderableType | None:
    """The panel of ``record.whole_run``, or ``None`` when the record has none."""
    run = record.whole_run
    if run is None:
        return None
    parts: list[RenderableType] = [goodput_text(run), _bar(run), _table(run)]
    fixes = _fixes(run)
    if fixes is not None:
        parts.append(fixes)
    ranks = ranks_words(record)
    if ranks:
        parts.append(Text(ranks))
    cost = cost_words(record)
    if cost:
        parts.append(Text(cost, style="dim"))
    return Panel(
        Group(*parts),
        title=f"the whole run: where its {duration(run.wall_s)} went",
        title_align="left",
        border_style="cyan",
    )


def duration(seconds: float) -> str:
    """``4.2 s``, ``3 min 20 s``, ``2 h 05 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def goodput_words(run: WholeRun) -> list[str]:
    """The goodput and, for a cut run, its projection, in sentences (terminal and page)."""
    steps = run.seconds_of("steps")
    counted = sum(k.count for k in run.categories if k.kind == "steps")
    pace = (
        f" (steady step {run.steady_step_ms:.1f} ms, the median of its blocks)"
        if run.steady_step_ms
        else ""
    )
    lines = [
        f"goodput {run.goodput:.0%}: {duration(steps)} of {duration(run.wall_s)} went to "
        f"training steps at their steady pace, {counted} after the first{pace}"
    ]
    if run.ending == "cut":
        if run.projected_goodput is not None:
            lines.append(
                f"projected for the whole run: goodput {run.projected_goodput:.0%} "
                f"({run.projection})"
            )
        else:
            lines.append("the run was cut before it ended; too little was seen to project it")
    return lines


def goodput_text(run: WholeRun) -> Text:
    text = Text()
    for i, line in enumerate(goodput_words(run)):
        text.append(("\n" if i else "") + line, style="bold" if i == 0 else "")
    return text


def _bar(run: WholeRun) -> Text:
    """The run as one bar, each kind's share in its colour."""
    text = Text()
    totals: dict[str, float] = {}
    for kind in run.categories:
        totals[kind.kind] = totals.get(kind.kind, 0.0) + kind.seconds
    wall = max(run.wall_s, 1e-9)
    used = 0
    for name, seconds in totals.items():
        cells = round(seconds / wall * BAR_WIDTH)
        cells = min(cells, BAR_WIDTH - used)
        if cells:
            text.append("█" * cells, style=whole_kind_look(name)[0])
            used += cells
    return text


def _table(run: WholeRun) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None)
    table.add_column("kind")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    table.add_column("count", justify="right")
    table.add_column("where, what", overflow="fold")
    wall = max(run.wall_s, 1e-9)
    for kind in run.categories:
        style, _, words = whole_kind_look(kind.kind)
        table.add_row(
            Text(words, style=style),
            f"{kind.seconds:.2f}",
            f"{kind.seconds / wall:.1%}",
            str(kind.count) if kind.count else "",
            where_words(kind),
        )
    return table


def where_words(kind: WholeKind) -> str:
    """Where and what, the place once (startup's detail names its places itself)."""
    where = kind.where if kind.where and kind.where not in kind.detail else ""
    return "; ".join(w for w in (where, kind.detail) if w)


def _fixes(run: WholeRun) -> Text | None:
    with_fix = sorted(
        (k for k in run.categories if k.fix), key=lambda k: k.saves_s or 0.0, reverse=True
    )
    if not with_fix:
        return None
    text = Text("what to change", style="bold")
    for kind in with_fix:
        text.append(f"\n→ {kind.fix}")
        saving = saving_words(kind, run.wall_s)
        if saving:
            text.append(f" ({saving})", style="dim")
    return text


def ranks_words(record: RunRecord) -> str:
    """A job's ranks side by side: whose accounts these are, and each rank's goodput."""
    job = record.distributed
    if job is None or not any(r.goodput is not None for r in job.ranks):
        return ""
    each = "; ".join(
        f"rank {r.rank} {r.goodput:.0%} of {r.wall_s:.1f} s"
        + (f" (checkpoints {r.whole_s['checkpoint']:.1f} s)" if r.whole_s.get("checkpoint") else "")
        for r in job.ranks
        if r.goodput is not None and r.wall_s is not None
    )
    return f"these are rank {job.bounding_rank}'s accounts; goodput by rank: {each}"


def cost_words(record: RunRecord) -> str:
    """What watching cost each step, beside the steady step."""
    run, cost = record.whole_run, record.overhead_ms.get("watch_per_step_ms")
    if run is None or cost is None:
        return ""
    share = f" ({cost / run.steady_step_ms:.1%} of the steady step)" if run.steady_step_ms else ""
    return f"torchdoctor's own work in its hooks: {cost * 1000:.0f} us per watched step{share}"


def saving_words(kind: WholeKind, wall_s: float) -> str:
    if kind.saves_s is None:
        return ""
    return f"up to {kind.saves_s:.1f} s of this run, {kind.saves_s / max(wall_s, 1e-9):.0%}"
