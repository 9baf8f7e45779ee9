"""Exclusive attribution of a step's time to its parts, on the host clock or device events.

Phases nest (a forward pass inside ``optimizer.step(closure)``); time always goes to the
innermost open phase, and to ``other`` when none is open, so the parts of a step sum to the
step exactly. Every transition is a *mark*; on an accelerator each mark also records a device
event, and durations are read from the events only after the measured steps, so timing adds no
synchronisation inside a step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from ..record import STEP_PARTS

OTHER = "other"


class _Mark(NamedTuple):
    """A transition. A tuple of atoms, so the garbage collector stops tracking it: thousands of
    marks cost the collector nothing (as dataclasses they slowed every step of a long run)."""

    label: str  # the part that the time *before* this mark belongs to
    host_ns: int
    event: object | None


#: A mark made without ``_Mark.__new__``'s Python frame (marks are made several times a step).
_new_mark = tuple.__new__


class StepTimeline:
    """Marks of the current step; ``cut()`` closes a step and returns its marks."""

    def __init__(
        self,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        make_event: Callable[[], object] | None = None,
    ) -> None:
        self._clock_ns = clock_ns
        self._make_event = make_event
        self._stack: list[str] = []
        self._marks: list[_Mark] = []
        self._start = self._mark_now(OTHER)

    def set_event_factory(self, make_event: Callable[[], object]) -> None:
        """Record a device event at every mark from now on."""
        self._make_event = make_event

    @property
    def depth(self) -> int:
        return len(self._stack)

    @property
    def current(self) -> str:
        return self._stack[-1] if self._stack else OTHER

    def _mark_now(self, label: str) -> _Mark:
        make_event = self._make_event
        event = make_event() if make_event is not None else None
        return _new_mark(_Mark, (label, self._clock_ns(), event))

    #: Keep only the stack of open parts, no marks (``run --whole`` after its measured steps):
    #: a cut step has its end only.
    lean = False

    # push and pop run several times in every step: ``current`` and ``_mark_now`` are inlined
    # in them (a Python call each fewer per mark).
    def push(self, part: str) -> None:
        stack = self._stack
        if not self.lean:
            make_event = self._make_event
            event = make_event() if make_event is not None else None
            label = stack[-1] if stack else OTHER
            self._marks.append(_new_mark(_Mark, (label, self._clock_ns(), event)))
        stack.append(part)

    def pop(self, part: str) -> None:
        stack = self._stack
        if not self.lean:
            make_event = self._make_event
            event = make_event() if make_event is not None else None
            label = stack[-1] if stack else OTHER
            self._marks.append(_new_mark(_Mark, (label, self._clock_ns(), event)))
        if stack and stack[-1] == part:
            stack.pop()
        elif part in stack:
            # Tolerate unbalanced exits (an exception skipped a post-hook): drop down to ``part``.
            while stack and stack.pop() != part:
                pass

    def cut(self) -> list[_Mark]:
        """Close the current step: its marks from its start to now (inclusive)."""
        end = self._mark_now(self.current)
        if self.lean:
            return [end]
        marks = [self._start, *self._marks, end]
        self._start = _Mark(OTHER, end.host_ns, end.event)
        self._marks = []
        return marks

    def reset(self) -> None:
        """Start a new step now, discarding marks (after work that must not count)."""
        self._marks = []
        self._start = self._mark_now(OTHER)


_PART_INDEX = {name: i for i, name in enumerate(STEP_PARTS)}
_OTHER_INDEX = _PART_INDEX[OTHER]


def parts_from_marks(marks: list[_Mark], use_events: bool = False) -> dict[str, float]:
    """Milliseconds per step part from a step's marks (host clock or device events)."""
    if use_events:
        parts = dict.fromkeys(STEP_PARTS, 0.0)
        finished(marks)
        for prev, mark in zip(marks, marks[1:]):
            if prev.event is not None and mark.event is not None:
                ms = float(prev.event.elapsed_time(mark.event))  # type: ignore[attr-defined]
            else:
                ms = (mark.host_ns - prev.host_ns) / 1e6
            parts[mark.label if mark.label in parts else OTHER] += ms
        return parts
    # the host clock (every step of a logged phase, in the script's step): ns summed by the
    # part's index, then ms
    ns = [0] * len(STEP_PARTS)
    index = _PART_INDEX.get
    before = marks[0][1] if marks else 0
    for label, host_ns, _ in marks[1:]:
        ns[index(label, _OTHER_INDEX)] += host_ns - before
        before = host_ns
    return dict(zip(STEP_PARTS, [total / 1e6 for total in ns]))


def finished(marks: list[_Mark]) -> None:
    """Wait until the device has finished the marks' events: an event is read only once it
    completed (reading one before raises on CUDA and other accelerators). After the run's one
    synchronisation they all have, and this costs a query each."""
    for mark in reversed(marks):
        event = mark.event
        if event is not None and not event.query():  # type: ignore[attr-defined]
            event.synchronize()  # type: ignore[attr-defined]
