"""diagnose_loader end to end on a real DataLoader whose cost sits in one transform."""

from __future__ import annotations

import json

import pytest
import torch
from test_transforms import Compose, Scale, SlowBlur
from torch.utils.data import DataLoader, Dataset

from torchdoctor.loader import diagnose_loader
from torchdoctor.record import RunRecord, SweepPoint, WorkerSweep

#: Seconds each: left out of `make test-fast`.
pytestmark = pytest.mark.slow


class Photos(Dataset):
    def __init__(self, n: int = 400) -> None:
        self.n = n
        self.transform = Compose([Scale(1 / 255), SlowBlur(), Scale(2.0)])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        image = torch.full((3, 8, 8), float(i % 255))
        return self.transform(image), i % 10


@pytest.mark.integration
def test_diagnose_an_input_bound_loader(tmp_path):
    loader = DataLoader(Photos(), batch_size=4)
    lines: list[str] = []
    diagnosis = diagnose_loader(
        loader,
        accelerator=True,
        batches_per_setting=6,
        budget_s_per_setting=2.0,
        memory_batches=20,
        cpu_count=2,
        on_progress=lines.append,
    )
    kinds = [f.kind for f in diagnosis.findings]
    report = diagnosis.report
    # 4 x 30 ms of sleep per batch: workers help, the blur is the cost.
    assert report.worker_sweep is not None and report.worker_sweep.best_workers >= 2
    assert "loader.num_workers" in kinds and "loader.pin_memory" in kinds
    costly = next(f for f in diagnosis.findings if f.kind == "loader.costly_transform")
    assert costly.detail["name"] == "SlowBlur"
    assert max(report.transforms, key=lambda t: t.share).name == "SlowBlur"
    assert report.memory is not None and report.memory.bytes_per_batch == 4 * 3 * 8 * 8 * 4 + 4 * 8
    assert report.copy_on_read is not None and not report.copy_on_read.flagged
    # The memory pass ran at the sweep's pick.
    assert report.worker_memory is not None
    assert max(report.worker_memory.workers) == report.worker_sweep.best_workers
    assert set(report.seconds) == {"costs", "sweep", "memory"}
    assert any("num_workers=" in line for line in lines)
    # The record takes it as JSON and gives it back, typed.
    record = RunRecord(loader_report=report, findings=diagnosis.findings)
    path = record.save(tmp_path / "run.json")
    json.loads(path.read_text())
    loaded = RunRecord.load(path).loader_report
    assert loaded == report
    assert [t.name for t in loaded.transforms][:3] == ["Scale #1", "SlowBlur", "Scale #3"]
    assert loader._iterator is None


def test_a_sweep_measured_elsewhere_is_used_as_the_doctors_own():
    loader = DataLoader(Photos(40), batch_size=4)
    whole_steps = WorkerSweep(
        points=[SweepPoint(0, 2.0), SweepPoint(1, 2.1), SweepPoint(2, 4.0), SweepPoint(4, 7.9)],
        best_workers=4,
        stopped="exhausted",
        candidates=[0, 1, 2, 4],
        measures="step",
    )
    diagnosis = diagnose_loader(loader, accelerator=False, worker_sweep=whole_steps, memory=False)
    report = diagnosis.report
    assert report.worker_sweep is whole_steps and "sweep" not in report.seconds
    # Memory and advice are for the sweep's pick, as after a sweep of the doctor's own.
    assert report.memory is not None and report.memory.num_workers == 4
    assert report.memory.batches_in_flight == 8
    (nw,) = [f for f in diagnosis.findings if f.kind == "loader.num_workers"]
    assert nw.fix == "DataLoader(..., num_workers=4)" and nw.detail["measures"] == "step"


@pytest.mark.integration
def test_diagnosis_reports_copy_on_read_with_its_fix():
    from test_memory import PythonRows

    loader = DataLoader(PythonRows(), batch_size=16, num_workers=2)
    diagnosis = diagnose_loader(loader, accelerator=False, sweep=False, memory_budget_s=30.0)
    report = diagnosis.report
    assert report.copy_on_read is not None and report.copy_on_read.flagged
    (cow,) = [f for f in diagnosis.findings if f.kind == "loader.copy_on_read"]
    assert "PythonRows" in cow.title and "numpy" in cow.fix
    assert report.worker_memory is not None and max(report.worker_memory.workers) == 2
    assert report.worker_sweep is None
