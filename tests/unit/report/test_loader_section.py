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


def test_a_sweep_of_workers_with_threads_shows_the_threads_of_each_trial():
    sweep = WorkerSweep(
        points=[
            SweepPoint(0, 21.7, threads=2),
            SweepPoint(0, 22.0, threads=1),
            SweepPoint(2, 38.0, threads=1),
        ],
        best_workers=2,
        best_threads=1,
        default_threads=2,
        stopped="exhausted",
        candidates=[0, 2],
        measures="step",
    )
    rows = rendered(LoaderReport(worker_sweep=sweep), current_workers=0).splitlines()
    assert "num_workers sweep, with torch threads" in rows[0] and "threads" in rows[1]
    (now,) = [r for r in rows if r.rstrip().endswith("now")]
    (pick,) = [r for r in rows if r.rstrip().endswith("pick")]
    assert now.split()[:3] == ["0", "2", "21.7"] and pick.split()[:3] == ["2", "1", "38.0"]


def test_the_fix_panel_names_the_threads_to_set():
    from torchdoctor.record import FixTrial, JudgedSpeedup, RunRecord, Stat
    from torchdoctor.report.terminal import render_fix

    record = RunRecord(step_ms=Stat.of([46.0]))
    trial = FixTrial(
        overrides={"num_workers": 2},
        threads=1,
        code="DataLoader(..., num_workers=2)\ntorch.set_num_threads(1)",
        where="train.py:12",
        verified=JudgedSpeedup(1.75),
        after_step_ms=26.3,
    )
    out = io.StringIO()
    render_fix(record, trial, Console(file=out, width=200))
    text = out.getvalue()
    assert "DataLoader(..., num_workers=2); torch.set_num_threads(1)  (no code edited)" in text
    assert (
        "change the DataLoader at train.py:12 to DataLoader(..., num_workers=2) and call "
        "torch.set_num_threads(1) at the start of the script"
    ) in text
    out = io.StringIO()
    render_fix(record, FixTrial(threads=1, code="torch.set_num_threads(1)"), Console(file=out))
    assert "nothing to inject" not in out.getvalue()
