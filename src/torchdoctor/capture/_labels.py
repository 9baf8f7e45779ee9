"""A step's parts pushed and popped on the session's timeline, and labelled in a torch.profiler
trace while the trace phase lends its profiler."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._timeline import StepTimeline


class LabelledParts:
    """Of the capture session (a mixin): ``push`` and ``pop`` of a step's parts."""

    timeline: StepTimeline
    _profiler: Any
    #: The labels open in the profiler's trace, innermost last.
    _labels: list[Any]

    @property
    def profiler(self) -> Any:
        """The trace phase's profiler, lent while it records: each part is a labelled range."""
        return self._profiler

    @profiler.setter
    def profiler(self, profiler: Any) -> None:
        self._profiler = profiler
        # Without a profiler, a part's start and end are the timeline's alone: the hooks call its
        # push and pop with no call of the session's between (they run several times a step).
        if profiler is None:
            self.push, self.pop = self.timeline.push, self.timeline.pop
        else:
            self.__dict__.pop("push", None)
            self.__dict__.pop("pop", None)
        self.parts_moved()

    def parts_moved(self) -> None:
        """Told when ``push`` and ``pop`` change (the session hands them on to its hooks)."""

    def push(self, part: str) -> None:
        self.timeline.push(part)
        if self._profiler is not None:
            label = self._profiler.label(part)
            label.__enter__()
            self._labels.append(label)

    def pop(self, part: str) -> None:
        self.timeline.pop(part)
        if self._labels:
            self._labels.pop().__exit__(None, None, None)

    def close_labels(self) -> None:
        while self._labels:
            self._labels.pop().__exit__(None, None, None)
