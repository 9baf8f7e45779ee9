"""docs/record.md lists exactly the kinds the code knows, and the code uses only those."""

from __future__ import annotations

import re

import pytest

from paths import TESTS
from torchdoctor.analysis.syncs import KINDS as SYNC_KINDS
from torchdoctor.record import (
    DISTRIBUTED_FINDING_KINDS,
    FINDING_KINDS,
    LOADER_FINDING_KINDS,
    LOOP_FINDING_KINDS,
    SEVERITIES,
    STATUSES,
    STEP_BOUNDARY_KINDS,
    SYNC_FINDING_KINDS,
    TRACE_FINDING_KINDS,
    VERDICT_KINDS,
    WHOLE_FINDING_KINDS,
    WHOLE_KINDS,
    Finding,
)

DOC = (TESTS.parent / "docs" / "record.md").read_text(encoding="utf-8")


def _listed(label: str) -> list[str]:
    """The backquoted values of the ``- **<label>...:**`` item of the Kinds section."""
    section = DOC.split("## Kinds", 1)[1]
    match = re.search(rf"^- \*\*{re.escape(label)}(.*?)(?=^- \*\*|^#|\Z)", section, re.S | re.M)
    assert match, f"docs/record.md has no '{label}' item under '## Kinds'"
    text = match.group(1).split(":", 1)[1]  # after the label (and its link to the kinds' doc)
    return re.findall(r"`([^`]+)`", text)


@pytest.mark.parametrize(
    ("label", "code"),
    [
        ("Verdict kinds", VERDICT_KINDS),
        ("Statuses", STATUSES),
        ("Severities", SEVERITIES),
        ("Step boundaries", STEP_BOUNDARY_KINDS),
        ("Sync finding kinds", SYNC_FINDING_KINDS),
        ("Loader finding kinds", LOADER_FINDING_KINDS),
        ("Trace finding kinds", TRACE_FINDING_KINDS),
        ("Distributed finding kinds", DISTRIBUTED_FINDING_KINDS),
        ("Loop finding kinds", LOOP_FINDING_KINDS),
        ("Whole-run finding kinds", WHOLE_FINDING_KINDS),
    ],
)
def test_the_doc_lists_the_kinds_of_the_code(label, code):
    assert _listed(label) == list(code)


def test_the_sync_finder_describes_every_sync_kind_and_no_other():
    assert set(SYNC_KINDS) == set(SYNC_FINDING_KINDS)


def test_kinds_are_not_defined_twice():
    assert len(set(FINDING_KINDS)) == len(FINDING_KINDS)


def test_a_finding_of_an_unknown_kind_or_severity_is_refused():
    Finding(kind="item", title="t", fix="f")
    with pytest.raises(ValueError, match="tensor-item"):
        Finding(kind="tensor-item", title="t", fix="f")
    with pytest.raises(ValueError, match="severity"):
        Finding(kind="item", title="t", fix="f", severity="fatal")


def test_the_doc_lists_the_whole_runs_kinds():
    row = next(line for line in DOC.splitlines() if line.startswith("| `whole_run`"))
    listed = re.findall(r"`([a-z-]+)`", row.split("each `kind`:", 1)[1].split(";", 1)[0])
    assert listed == list(WHOLE_KINDS)
