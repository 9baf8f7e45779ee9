"""Fixtures of the capture's unit tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from torchdoctor.capture.phases.measure import MeasurePhase


@pytest.fixture
def slow_measure_start(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """``slow(seconds)``: the measured phase's start takes that much longer (a phase switch far
    longer than any hook's cost, torchdoctor's work between two steps)."""

    def slow(seconds: float) -> None:
        start = MeasurePhase.start

        def slow_start(self, session):
            time.sleep(seconds)
            start(self, session)

        monkeypatch.setattr(MeasurePhase, "start", slow_start)

    return slow
