"""Where the tests' own files live, so a test's location in the tree never decides what it reads."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: Training scripts the end-to-end tests run.
SCENARIOS = TESTS / "scenarios"
#: Checked-in inputs: sync corpus, HTA reference figures, v1 records, real profiler traces.
DATA = TESTS / "data"
#: Real Kineto traces from HolisticTraceAnalysis (MIT, see the README beside them).
HTA_TRACES = DATA / "hta"
