"""The mutation check's rows stay live: each rule's text is found once in its file, so a rule
rewritten without its row fails here, at once, not only when the slow check is run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mutations import MUTATIONS, PACKAGE  # noqa: E402


def test_every_rule_is_found_once_in_its_file():
    stale = [
        f"{m.name} ({m.path}: {(PACKAGE / m.path).read_text().count(m.rule)} times)"
        for m in MUTATIONS
        if (PACKAGE / m.path).read_text().count(m.rule) != 1
    ]
    assert not stale, "update these rows with their rules: " + "; ".join(stale)


def test_every_row_names_tests_that_exist():
    root = PACKAGE.parents[1]
    missing = [
        f"{m.name}: {t}"
        for m in MUTATIONS
        for t in m.tests
        if not (root / t.split("::")[0]).exists()
    ]
    assert not missing, missing
