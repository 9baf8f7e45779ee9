"""The loader doctor's section of the terminal report, rendered from ``RunRecord.loader_report``.

Works from the record only, so a saved record (of either schema) re-renders without re-running.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..record import LoaderMemory, LoaderReport, TransformCost, WorkerSweep
from ._style import GOOD, SEVERITIES

_BAR_WIDTH = 24


def loader_section(report: LoaderReport | None, current_workers: int | None = None) -> Group | None:
    """Rich renderables for the sweep curve, the transform costs and the memory; ``None`` if
    there is no report or it holds nothing to show."""
    if report is None:
        return None
    parts: list[Any] = []
    if report.worker_sweep is not None:
        parts.append(_sweep_table(report.worker_sweep, current_workers))
    if report.transforms:
        parts.append(_transforms_table(report.transforms))
    if report.memory is not None:
        parts.append(_memory_text(report.memory))
    cow = report.copy_on_read
    if cow is not None and cow.flagged:
        parts.append(
            Text(
                f"copy-on-read: worker memory (USS) grew {cow.growth_mb:.0f} MB per worker "
                f"through the run ({cow.start_mb:.0f} -> {cow.end_mb:.0f} MB)",
                style=SEVERITIES["warning"].style,
            )
        )
    return Group(*parts) if parts else None


def render_loader(
    report: LoaderReport | None, console: Console | None = None, current_workers: int | None = None
) -> None:
    """Print :func:`loader_section` to ``console`` (stdout by default)."""
    section = loader_section(report, current_workers)
    if section is not None:
        (console or Console()).print(section)


def _sweep_table(sweep: WorkerSweep, current: int | None) -> Table:
    what = "batches/s (whole steps)" if sweep.measures == "step" else "batches/s (loader alone)"
    threads = sweep.default_threads is not None  # searched with the main process's threads
    title = "num_workers sweep, with torch threads" if threads else "num_workers sweep"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    table.add_column("num_workers", justify="right")
    if threads:
        table.add_column("threads", justify="right")
    table.add_column(what, justify="right")
    table.add_column("")
    table.add_column("")
    points = sweep.points
    top = max((p.batches_per_s for p in points), default=0.0) or 1.0
    for p in points:
        n = p.num_workers
        marks = []
        if p is sweep.best:
            marks.append(f"[{GOOD}]pick[/]")
        if n == current and p is sweep.point(n):
            marks.append("now")
        cells = [str(n)] + ([str(p.threads)] if threads else [])
        table.add_row(
            *cells,
            f"{p.batches_per_s:.1f}",
            _bar(p.batches_per_s / top),
            " ".join(marks),
        )
    stopped = {"plateau": "stopped on a plateau", "target": "stopped: faster than the model"}
    note = stopped.get(sweep.stopped, "")
    if note:
        table.caption = note
        table.caption_justify = "left"
    return table


def _transforms_table(transforms: list[TransformCost]) -> Table:
    table = Table(title="time to make a batch", title_justify="left", box=None, pad_edge=False)
    table.add_column("part")
    table.add_column("share", justify="right")
    table.add_column("")
    table.add_column("ms/batch", justify="right")
    worst = max(transforms, key=lambda t: t.share)
    for t in transforms:
        style = "bold" if t is worst else ""
        table.add_row(
            Text(t.name, style=style),
            f"{100 * t.share:.0f}%",
            _bar(t.share),
            f"{t.ms_per_batch:.1f}",
        )
    return table


def _memory_text(memory: LoaderMemory) -> Text:
    per_batch = memory.bytes_per_batch
    line = (
        f"memory: {_mb(per_batch)} per batch x {memory.batches_in_flight} in flight "
        f"({memory.num_workers} workers x prefetch_factor {memory.prefetch_factor}) = "
        f"{_mb(memory.bytes_in_flight)}"
    )
    advised = memory.bytes_per_batch_advised
    if advised is not None and advised < per_batch:
        line += f"; {_mb(advised)} per batch with the dtype advice"
    return Text(line)


def _bar(fraction: float) -> str:
    cells = max(0, min(_BAR_WIDTH, round(fraction * _BAR_WIDTH)))
    return "█" * cells


def _mb(nbytes: float) -> str:
    if nbytes >= 1e9:
        return f"{nbytes / 1e9:.2f} GB"
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.0f} MB"
    return f"{nbytes / 1e3:.0f} kB"


__all__ = ["loader_section", "render_loader"]
