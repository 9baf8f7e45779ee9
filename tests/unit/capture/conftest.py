"""Fixtures of the capture's unit tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hog import spin
from torchdoctor.capture.phases.measure import MeasurePhase


@pytest.fixture
def slow_measure_start(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """``slow(seconds)``: the measured phase's start takes that much more CPU time (a phase switch
    far longer than any hook's cost, torchdoctor's work between two steps)."""

    def slow(seconds: float) -> None:
        start = MeasurePhase.start

        def slow_start(self, session):
            spin(seconds)
            start(self, session)

        monkeypatch.setattr(MeasurePhase, "start", slow_start)

    return slow
