"""Schema-1 files load into the typed loader report, fix trial and overrides of schema 2."""

from __future__ import annotations

import json

from paths import DATA
from torchdoctor.record import (
    SCHEMA_VERSION,
    FixTrial,
    LoaderReport,
    RunRecord,
    TransformCost,
    WorkerSweep,
)

RUN_V1 = DATA / "records" / "run_v1.json"


def test_v1_loader_doctor_entries_become_the_loader_report():
    v1 = json.loads(RUN_V1.read_text())["extra"]
    report = RunRecord.load(RUN_V1).loader_report
    assert isinstance(report, LoaderReport)
    assert isinstance(report.worker_sweep, WorkerSweep)
    assert report.worker_sweep.best_workers == v1["worker_sweep"]["best_workers"] == 4
    assert report.worker_sweep.measures == "step"
    assert [p.num_workers for p in report.worker_sweep.points] == [0, 1, 2, 4]
    assert report.worker_sweep.speedup_over(0) > 4
    assert all(isinstance(t, TransformCost) for t in report.transforms)
    assert [t.name for t in report.transforms][:3] == ["ToFloat", "RandomBlur", "Normalize"]
    # Renamed in schema 2: loader_memory -> memory, loader_doctor_s -> seconds.
    assert report.memory is not None and report.memory.bytes_in_flight == 394240
    assert report.memory.leaves[0].shape == [16, 3, 16, 16]
    assert report.seconds == v1["loader_doctor_s"]
    assert report.copy_on_read is not None and not report.copy_on_read.flagged
    assert report.worker_memory is not None
    assert len(report.worker_memory.uss_mb_per_worker) == report.copy_on_read.samples


def test_v1_fix_becomes_a_fix_trial_with_the_rerun_as_a_record():
    record = RunRecord.load(RUN_V1)
    assert "extra" not in record.to_dict()
    trial = record.fix
    assert isinstance(trial, FixTrial)
    assert trial.overrides == {"num_workers": 4, "persistent_workers": True}
    assert trial.verified.speedup == 4.1 and trial.predicted_speedup == 4.089
    assert trial.where.endswith("slow_transform.py:62")
    assert trial.code == "DataLoader(..., num_workers=4, persistent_workers=True)"
    assert isinstance(trial.after, RunRecord)
    assert trial.after.loader_overrides == trial.overrides  # v1: fix.after.extra
    assert trial.after.loader.num_workers == 4 and trial.after.loader_report is None
    assert trial.after_step_ms == trial.after.step_ms.mean
    assert record.loader_overrides == {}


def test_a_migrated_record_saves_as_schema_2_and_loads_back_equal(tmp_path):
    record = RunRecord.load(RUN_V1)
    path = record.save(tmp_path / "run.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["loader_report"]["memory"]["bytes_per_batch"] == 49280
    assert data["fix"]["after"]["loader_overrides"]["num_workers"] == 4
    assert RunRecord.load(path) == record


def test_v1_loader_and_fix_sections_render_as_before():
    """The loader doctor's section and the fix panel of ``torchdoctor report run_v1.json`` at 100
    columns, as schema 1 rendered them (run_v1.loader.txt, saved before the typed record)."""
    import io

    from rich.console import Console

    from torchdoctor.report.terminal import render

    out = io.StringIO()
    render(RunRecord.load(RUN_V1), Console(file=out, width=100))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    expected = (DATA / "records" / "run_v1.loader.txt").read_text().splitlines()
    sweep, panel = expected[:15], expected[15:]
    for block in (sweep, panel):
        start = lines.index(block[0])
        assert lines[start : start + len(block)] == block
