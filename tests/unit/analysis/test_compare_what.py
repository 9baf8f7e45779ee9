"""compare says what it compares: different scripts, devices or kinds of record come first, and
impossible numbers are refused with a clear error (no traceback, no "-0.91x")."""

from __future__ import annotations

import math

import pytest

from torchdoctor.analysis.compare import IMPROVED, CompareError, compare
from torchdoctor.analysis.verdict import summarise
from torchdoctor.record import Environment, LoaderSettings, RunRecord, StepSeries
from torchdoctor.report.compare import warning


def record(steps, command=("train.py",), device="cpu", batch=8) -> RunRecord:
    series = StepSeries()
    for ms in steps:
        series.step_ms.append(ms)
        series.batches.append(1)
        for part in ("data_wait", "to_device", "forward", "backward", "optimizer"):
            series.part(part).append(0.0)
        series.part("other").append(ms)
    rec = RunRecord(steps=series, command=list(command))
    rec.env = Environment(
        torch_version="2.13.0", python_version="3.11", platform="linux", device=device,
        device_name=device, clock="wall", torch_threads=1, cpu_logical=2, cpu_physical=2,
    )  # fmt: skip
    rec.loader = LoaderSettings(
        "D", 100, batch, 0, False, False, None, False, "BatchSampler", "default_collate"
    )
    summarise(rec)
    return rec


STEADY = [10.0, 10.1, 9.9, 10.0, 10.05, 9.95] * 2


def test_the_same_script_twice_is_like_for_like():
    c = compare(record(STEADY), record([x / 2 for x in STEADY]))
    assert c.kind == IMPROVED and c.like_for_like and c.differences == []
    assert warning(c) is None


def test_different_scripts_lead_with_a_warning():
    c = compare(record(STEADY, ("slow.py",)), record([x / 70 for x in STEADY], ("tiny.py",)))
    assert not c.like_for_like
    assert "different scripts: A ran slow.py, B ran tiny.py" in c.differences
    assert warning(c).startswith("not a like-for-like comparison")


def test_different_devices_and_arguments_are_said():
    c = compare(record(STEADY, ("t.py", "--a")), record(STEADY, ("t.py", "--b"), device="cuda"))
    assert any(d.startswith("different devices") for d in c.differences)
    assert any(d.startswith("different arguments") for d in c.differences)
    assert not c.like_for_like


@pytest.mark.parametrize("bad", [1e300, 0.0, -3.0, math.inf, math.nan])
def test_impossible_step_times_are_refused(bad):
    with pytest.raises(CompareError, match="impossible step times"):
        compare(record(STEADY), record([*STEADY[:-1], bad]))


def test_a_jobs_samples_per_step_count_every_rank():
    from torchdoctor.record import DistributedReport

    job = record(STEADY)
    job.distributed = DistributedReport(world_size=2)
    one = record(STEADY, batch=16)
    c = compare(one, job)  # 1 x 16 against 2 ranks x 8: the same samples per step
    assert c.measure == "mean step", c.notes
    assert any("world sizes" in d for d in c.differences)
