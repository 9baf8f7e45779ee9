"""The loader doctor's section of the terminal report, rendered from the typed LoaderReport."""

from __future__ import annotations

import io

from rich.console import Console

from torchdoctor.record import (
    CopyOnRead,
    LoaderMemory,
    LoaderReport,
    SweepPoint,
    TransformCost,
    WorkerSweep,
)
from torchdoctor.report.loader import render_loader


def rendered(report: LoaderReport | None, current_workers: int | None = None) -> str:
    out = io.StringIO()
    render_loader(report, Console(file=out, width=120), current_workers=current_workers)
    return out.getvalue()


def test_loader_section_renders_the_sweep_costs_memory_and_copy_on_read():
    report = LoaderReport(
        worker_sweep=WorkerSweep(
            points=[SweepPoint(0, 5.0), SweepPoint(2, 10.0), SweepPoint(4, 19.0)],
            best_workers=4,
            stopped="plateau",
            candidates=[0, 2, 4],
            measures="loader",
        ),
        transforms=[
            TransformCost("SlowBlur", share=0.9, ms_per_batch=120.0),
            TransformCost("collate_fn", share=0.1, ms_per_batch=13.0, kind="collate"),
        ],
        memory=LoaderMemory(
            bytes_per_batch=167_772_160,
            num_workers=8,
            prefetch_factor=1,
            batches_in_flight=8,
            bytes_in_flight=8 * 167_772_160,
            bytes_per_batch_advised=33_554_432,
        ),
        copy_on_read=CopyOnRead(
            flagged=True, growth_mb=48.0, start_mb=14.0, end_mb=62.0, correlation=0.99, samples=40
        ),
    )
    text = rendered(report, current_workers=0)
    assert "pick" in text and "now" in text and "stopped on a plateau" in text
    assert "batches/s (loader alone)" in text
    assert "SlowBlur" in text and "90%" in text
    assert "168 MB per batch x 8 in flight" in text and "1.34 GB" in text and "34 MB" in text
    assert "copy-on-read" in text and "grew 48 MB per worker" in text


def test_nothing_to_show_prints_nothing():
    assert rendered(None) == ""
    assert rendered(LoaderReport()) == ""
    unflagged = CopyOnRead(False, 0.5, 10.0, 10.5, 0.1, 40)
    assert rendered(LoaderReport(copy_on_read=unflagged, seconds={"memory": 1.0})) == ""
