"""Version-2 records (each judged speedup spelled as keys of its own in trials, ``fix`` and
``patch``) load as one ``judged`` value each, and render as they did.

``run_v2.json`` and ``run_v2.report.txt`` (``COLUMNS=100 torchdoctor report FILE``, trailing
spaces stripped) were written by schema 2's code (57300c1): run_v1's record with trials, a
judged ``--fix`` and a patch added.
"""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from paths import DATA
from torchdoctor.analysis.compare import compare
from torchdoctor.record import (
    IMPROVED,
    NO_CHANGE,
    REGRESSED,
    SCHEMA_VERSION,
    JudgedSpeedup,
    RecordError,
    RunRecord,
)
from torchdoctor.report.terminal import render

RECORDS = DATA / "records"
RUN_V2 = RECORDS / "run_v2.json"


def test_each_judged_speedup_of_a_v2_record_is_one_value():
    assert json.loads(RUN_V2.read_text())["schema_version"] == 2
    record = RunRecord.load(RUN_V2)
    judged = {t.name: t.judged for t in record.trials}
    assert judged == {
        "amp": JudgedSpeedup(2.0, 1.9, 2.1, 0.1, IMPROVED),
        # a trial's judgement was not saved: derived by the rule, against its own allowance
        "threads": JudgedSpeedup(1.05, 1.01, 1.09, 0.12, NO_CHANGE),
        "compile": JudgedSpeedup(0.71, 0.69, 0.73, 0.1, REGRESSED),
        "channels-last": None,
    }
    assert record.trials[1].detail == {"outlier_steps": 1}  # the allowance moved out of it
    assert record.fix.verified == JudgedSpeedup(4.1, 3.62, 4.55, 0.1, IMPROVED)
    assert record.patch.judged == JudgedSpeedup(3.95, 3.75, 4.15, 0.1, IMPROVED)
    loader, threads, sync = record.patch.remedies
    assert loader.judged == JudgedSpeedup(3.9, 3.7, 4.1, None, IMPROVED)
    assert threads.judged == JudgedSpeedup(1.02, 0.97, 1.07, None, NO_CHANGE)
    # a rewrite judged by its losses has no speedup: kept, by its numerics
    assert sync.judged is None and sync.numerics and sync.kept and sync.checked_losses == 4


def test_report_of_a_v2_record_is_unchanged():
    record = RunRecord.load(RUN_V2)
    console = Console(width=100, file=io.StringIO(), record=True, color_system=None)
    render(record, console)
    text = "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())
    assert text == (RECORDS / "run_v2.report.txt").read_text()


def test_a_migrated_record_saves_as_the_current_schema_and_loads_back(tmp_path):
    record = RunRecord.load(RUN_V2)
    record.save(tmp_path / "run.json")
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["schema_version"] == SCHEMA_VERSION == 3
    assert saved["trials"][0]["judged"]["judgement"] == IMPROVED
    assert "speedup" not in saved["trials"][0] and "verified_speedup" not in saved["fix"]
    assert RunRecord.load(tmp_path / "run.json") == record


def test_old_records_still_compare():
    v1, v2 = RunRecord.load(RECORDS / "run_v1.json"), RunRecord.load(RUN_V2)
    result = compare(v1, v2)
    assert result.kind == NO_CHANGE and result.judged.speedup == 1.0
    assert result.to_dict()["interval"] == [result.judged.low, result.judged.high]


def test_a_damaged_v2_speedup_fails_with_its_field():
    data = json.loads(RUN_V2.read_text())
    data["trials"][0]["spread"] = ["a", 2.1]
    with pytest.raises(RecordError, match=r"trials\[0\]\.judged\.low: expected a number"):
        RunRecord.from_dict(data)
