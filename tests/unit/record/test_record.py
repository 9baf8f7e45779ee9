from __future__ import annotations

import json

import pytest

from torchdoctor.record import (
    SCHEMA_VERSION,
    Finding,
    RecordError,
    RunRecord,
    Stat,
    StepSeries,
    Verdict,
)


def _record() -> RunRecord:
    steps = StepSeries(step_ms=[10.0, 12.0, 11.0], data_wait_ms=[5.0, 6.0, 5.5], batches=[1, 1, 1])
    return RunRecord(
        steps=steps,
        step_ms=Stat.of(steps.step_ms),
        verdict=Verdict(kind="INPUT-BOUND", why="w", next="n", shares={"input": 0.5}),
        findings=[Finding(kind="host-sync", title="t", fix="f", file="a.py", line=3)],
        ceiling_speedup=2.0,
    )


def test_round_trip(tmp_path):
    path = _record().save(tmp_path / "r.json")
    again = RunRecord.load(path)
    assert again == _record()
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["measured_steps"] == 3
    assert data["step_ms"]["median"] == 11.0
    assert data["verdict"]["kind"] == "INPUT-BOUND"
    assert not list(tmp_path.glob(".*tmp")), "temp file left behind"


def test_stat_quantiles():
    s = Stat.of([float(i) for i in range(1, 11)])
    assert s.median == pytest.approx(5.5)
    assert s.p90 == pytest.approx(9.1)
    assert Stat.of([]) is None


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not valid JSON"),
        ('{"a": 1}', "no schema_version"),
        ('{"schema_version": 999}', "schema_version 999"),
    ],
)
def test_bad_records_are_refused(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(RecordError, match=message):
        RunRecord.load(path)


def test_missing_record(tmp_path):
    with pytest.raises(RecordError, match="no such file"):
        RunRecord.load(tmp_path / "nope.json")
