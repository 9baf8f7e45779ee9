"""The whole-run watch's passive stand-in, for every run that is not ``run --whole``.

torchtune's DummyProfiler habit: the hooks tell the watch what they see whether or not the run
is a whole run (:class:`~._whole.WholeRunWatch`), and this stand-in takes it and does nothing,
so no hook tests whether there is a watch. Its calls take no clock reading (the watch reads its
own clock when told no time), so a plain run pays one empty call per event: about seven a step,
measured with the hooks' move to an object at +1.4 k instructions a step over main's branches
(4.4734 M against 4.4720 M: benchmarks/capture_instructions.py's job, captured, 60 and 180
steps), half a percent of what capture adds to the step.
``tests/unit/capture/test_whole_accounts.py`` checks it has every member the hooks use, with
the watch's signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class NoWholeRun:
    """What the hooks tell the whole-run watch, taken and dropped (see the module docstring)."""

    active = False
    loading = False

    def batch_requested(self, key: int, now: int | None = None) -> None:
        pass

    def batch_returned(self, key: int, now: int | None = None) -> None:
        pass

    def loader_exhausted(self, key: int, now: int | None = None) -> None:
        pass

    def iterator_made(self, key: int, now: int) -> None:
        pass

    def loader_built(self, key: int) -> None:
        pass

    def forward_started(self, training: bool) -> None:
        pass

    def forward_ended(self, find: Callable[[], Any]) -> None:
        pass

    def backward_started(self, now: int | None = None) -> None:
        pass

    def training(self, now: int | None = None) -> None:
        pass

    def step_ended(self, now: int) -> None:
        pass
