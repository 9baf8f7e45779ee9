"""diagnose_loader end to end on a real DataLoader whose cost sits in one transform."""

from __future__ import annotations

import json

import pytest
import torch
from test_loader_costs import Compose, Scale, SlowBlur
from torch.utils.data import DataLoader, Dataset

from torchdoctor.capture.loader_doctor import diagnose_loader, loader_settings
from torchdoctor.record import RunRecord


class Photos(Dataset):
    def __init__(self, n: int = 400) -> None:
        self.n = n
        self.transform = Compose([Scale(1 / 255), SlowBlur(), Scale(2.0)])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        image = torch.full((3, 8, 8), float(i % 255))
        return self.transform(image), i % 10


def test_loader_settings_describe_the_loader():
    s = loader_settings(DataLoader(Photos(10), batch_size=4, num_workers=2, pin_memory=True))
    assert s.dataset.rsplit(".", 1)[-1] == "Photos"  # qualified by its module
    assert (s.dataset_len, s.batch_size, s.num_workers) == (10, 4, 2)
    assert s.pin_memory and s.prefetch_factor == 2
    assert s.sampler == "BatchSampler(SequentialSampler)"
    assert s.collate_fn.endswith(".default_collate") and not s.iterable


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
    # 4 x 30 ms of sleep per batch: workers help, the blur is the cost.
    assert diagnosis.sweep is not None and diagnosis.sweep.best_workers >= 2
    assert "loader.num_workers" in kinds and "loader.pin_memory" in kinds
    costly = next(f for f in diagnosis.findings if f.kind == "loader.costly_transform")
    assert costly.detail["name"] == "SlowBlur"
    assert max(diagnosis.transforms, key=lambda t: t.share).name == "SlowBlur"
    assert (
        diagnosis.memory is not None
        and diagnosis.memory.bytes_per_batch == 4 * 3 * 8 * 8 * 4 + 4 * 8
    )
    assert diagnosis.copy_on_read is not None and not diagnosis.copy_on_read.flagged
    assert any("num_workers=" in line for line in lines)
    # The record takes it as JSON and gives it back.
    record = RunRecord(extra=diagnosis.to_extra(), findings=diagnosis.findings)
    path = record.save(tmp_path / "run.json")
    extra = RunRecord.load(path).extra
    assert [t["name"] for t in extra["transforms"]][:3] == ["Scale #1", "SlowBlur", "Scale #3"]
    assert extra["worker_sweep"]["best_workers"] == diagnosis.sweep.best_workers
    json.dumps(extra)
    assert loader._iterator is None


def test_loader_section_renders_from_the_json_form():
    import io

    from rich.console import Console

    from torchdoctor.report.loader import render_loader

    extra = {
        "worker_sweep": {
            "points": [
                {"num_workers": 0, "batches_per_s": 5.0},
                {"num_workers": 2, "batches_per_s": 10.0},
                {"num_workers": 4, "batches_per_s": 19.0},
            ],
            "best_workers": 4,
            "stopped": "plateau",
            "measures": "loader",
        },
        "transforms": [
            {"name": "SlowBlur", "share": 0.9, "ms_per_batch": 120.0},
            {"name": "collate_fn", "share": 0.1, "ms_per_batch": 13.0},
        ],
        "loader_memory": {
            "bytes_per_batch": 167_772_160,
            "batches_in_flight": 8,
            "num_workers": 8,
            "prefetch_factor": 1,
            "bytes_in_flight": 8 * 167_772_160,
            "bytes_per_batch_advised": 33_554_432,
        },
        "copy_on_read": {"flagged": True, "growth_mb": 48.0, "start_mb": 14.0, "end_mb": 62.0},
    }
    out = io.StringIO()
    render_loader(extra, Console(file=out, width=120), current_workers=0)
    text = out.getvalue()
    assert "pick" in text and "now" in text and "stopped on a plateau" in text
    assert "SlowBlur" in text and "90%" in text
    assert "168 MB per batch x 8 in flight" in text and "1.34 GB" in text and "34 MB" in text
    assert "copy-on-read" in text
    empty = io.StringIO()
    render_loader({}, Console(file=empty))
    assert empty.getvalue() == ""


@pytest.mark.integration
def test_diagnosis_reports_copy_on_read_with_its_fix():
    from test_loader_memory import PythonRows

    loader = DataLoader(PythonRows(), batch_size=16, num_workers=2)
    diagnosis = diagnose_loader(loader, accelerator=False, sweep=False, memory_budget_s=30.0)
    assert diagnosis.copy_on_read is not None and diagnosis.copy_on_read.flagged
    (cow,) = [f for f in diagnosis.findings if f.kind == "loader.copy_on_read"]
    assert "PythonRows" in cow.title and "numpy" in cow.fix
    assert diagnosis.worker_memory is not None and max(diagnosis.worker_memory.workers) == 2
    assert "worker_sweep" in diagnosis.to_extra() and diagnosis.to_extra()["worker_sweep"] is None
