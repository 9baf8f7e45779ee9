"""Exclusive attribution of step time to parts, with a fake clock."""

from __future__ import annotations

import pytest

from torchdoctor.capture._timeline import StepTimeline, parts_from_marks


class FakeClock:
    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance(self, ms: float) -> None:
        self.ns += int(ms * 1e6)


def test_nested_phases_count_only_innermost_time():
    clock = FakeClock()
    tl = StepTimeline(clock)
    clock.advance(1)  # other
    tl.push("data_wait")
    clock.advance(10)
    tl.pop("data_wait")
    tl.push("optimizer")  # optimizer.step(closure)
    clock.advance(2)
    tl.push("forward")
    clock.advance(30)
    tl.pop("forward")
    tl.push("backward")
    clock.advance(40)
    tl.pop("backward")
    clock.advance(3)
    tl.pop("optimizer")
    clock.advance(4)  # other
    parts = parts_from_marks(tl.cut())
    assert parts == pytest.approx(
        {
            "data_wait": 10,
            "to_device": 0,
            "forward": 30,
            "backward": 40,
            "optimizer": 5,
            "evaluation": 0,
            "other": 5,
        }
    )
    assert sum(parts.values()) == pytest.approx(90)


def test_cut_starts_next_step_where_previous_ended():
    clock = FakeClock()
    tl = StepTimeline(clock)
    clock.advance(7)
    first = parts_from_marks(tl.cut())
    clock.advance(5)
    tl.push("forward")
    clock.advance(1)
    second = parts_from_marks(tl.cut())  # forward still open at the cut
    assert sum(first.values()) == pytest.approx(7)
    assert second["other"] == pytest.approx(5) and second["forward"] == pytest.approx(1)


def test_unbalanced_pop_recovers():
    clock = FakeClock()
    tl = StepTimeline(clock)
    tl.push("optimizer")
    tl.push("forward")  # an exception skipped forward's pop
    clock.advance(2)
    tl.pop("optimizer")
    assert tl.depth == 0
    clock.advance(3)
    parts = parts_from_marks(tl.cut())
    assert parts["forward"] == pytest.approx(2) and parts["other"] == pytest.approx(3)


def test_reset_discards_time_before_it():
    clock = FakeClock()
    tl = StepTimeline(clock)
    clock.advance(100)
    tl.reset()
    clock.advance(1)
    assert sum(parts_from_marks(tl.cut()).values()) == pytest.approx(1)


def test_device_events_are_used_when_present():
    class Event:
        """A device event: read only once the device has finished it, as CUDA's."""

        def __init__(self, t):
            self.t, self.done = t, False

        def query(self):
            return self.done

        def synchronize(self):
            self.done = True

        def elapsed_time(self, other):
            if not (self.done and other.done):
                raise RuntimeError("Both events must be completed before calculating elapsed time")
            return other.t - self.t

    clock = FakeClock()
    times = iter([0.0, 50.0, 80.0])
    tl = StepTimeline(clock, make_event=lambda: Event(next(times)))
    tl.push("forward")
    clock.advance(1)  # the host returns at once: kernels run asynchronously
    marks = tl.cut()
    parts = parts_from_marks(marks, use_events=True)  # waits for the device's events first
    assert parts["other"] == pytest.approx(50) and parts["forward"] == pytest.approx(30)
    assert all(m.event.done for m in marks)
