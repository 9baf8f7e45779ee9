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


@pytest.mark.parametrize(
    "data, message",
    [
        ({"steps": 5}, "steps: expected an object, got 5"),
        ({"steps": {"step_ms": [1.0, "x"]}}, 'steps.step_ms[1]: expected a number, got "x"'),
        ({"step_ms": {"median": 1.0}}, "step_ms.p90: missing"),
        ({"status": "done"}, 'status: expected one of 9 known values ("complete"'),
        ({"findings": [{"kind": "nope", "title": "t", "fix": "f"}]}, "findings[0].kind"),
        ({"verdict": {"kind": "HOST-BOUND", "why": 1, "next": "n"}}, "verdict.why"),
        ({"parts_ms": []}, "parts_ms: expected an object, got a list"),
        ({"notes": "text"}, "notes: expected a list"),
        ({"env": {"torch_version": True}}, "env.torch_version: expected a string, got true"),
        ({"steps": {"batches": [False]}}, "steps.batches[0]: expected a number, got false"),
    ],
)
def test_wrong_types_name_the_field_path(tmp_path, data, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **data}))
    with pytest.raises(RecordError) as err:
        RunRecord.load(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_v1_records_with_wrong_types_are_refused_too(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"schema_version": 1, "steps": 5}')
    with pytest.raises(RecordError, match="steps: expected an object, got 5"):
        RunRecord.load(path)
    path.write_text('{"schema_version": 1, "extra": [1]}')
    with pytest.raises(RecordError, match="extra: expected an object"):
        RunRecord.load(path)


def test_null_for_a_field_with_a_default_takes_the_default_and_optionals_stay_null(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "steps": None, "verdict": None}))
    record = RunRecord.load(path)
    assert record.steps == StepSeries() and record.verdict is None


def test_a_whole_number_is_a_float_and_unknown_keys_are_ignored(tmp_path):
    data = _record().to_dict()
    data["steps"]["step_ms"] = [10, 12, 11]
    data["from_a_newer_writer"] = {"x": 1}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert RunRecord.load(path).steps.step_ms == [10, 12, 11]


@pytest.mark.parametrize(
    "content, message",
    [
        (bytes(range(200, 256)), "not a text file"),
        (b"[1, 2, 3]", "the file holds a list, not a JSON object"),
        (b'"text"', 'the file holds "text", not a JSON object'),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_files_that_are_not_records_at_all(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(RecordError, match=message):
        RunRecord.load(path)
