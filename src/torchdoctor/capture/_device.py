"""The device a run trains on, and the clock its steps are timed with.

On an accelerator the host runs ahead of the device, so host timestamps measure launches, not
work; steps are then timed with events recorded on the device's current stream and read once,
after measuring (one synchronisation for the whole run, none inside a step).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .._devices import synchronize
from ._timeline import StepTimeline


class DeviceClock:
    """Finds the training device from the parameters trained and times with its events."""

    def __init__(self, timeline: StepTimeline) -> None:
        self._timeline = timeline
        self.device: torch.device | None = None
        self.uses_events = False

    @property
    def on_accelerator(self) -> bool:
        return self.device is not None and self.device.type != "cpu"

    def detect(self, parameters: Iterable[Any]) -> None:
        """The device of the first parameter (an optimizer's, or else the model's); switch to its
        events off the CPU."""
        for param in parameters:
            self.device = param.device
            break
        if self.on_accelerator:
            self._use_events(self.device)

    def _use_events(self, device: torch.device) -> None:
        event_cls = getattr(torch, "Event", None)  # torch>=2.4 device-agnostic events
        if event_cls is None:
            return

        def make_event():
            event = event_cls(device=device, enable_timing=True)
            event.record()
            return event

        self._timeline.set_event_factory(make_event)
        self.uses_events = True

    def synchronize(self) -> None:
        """Wait for the device once, after measuring, so recorded events can be read."""
        if self.uses_events and self.device is not None:
            synchronize(self.device)
