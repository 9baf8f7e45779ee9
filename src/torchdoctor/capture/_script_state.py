"""What the script already does, read once while its steps are measured, so a trial never
advises it: autocast around the model's forward (and its dtype), the model's call site and the
names the script gives its model and optimizer (for code written for this script).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch

from ._frames import is_user_file, statement_at


@dataclass
class CallSite:
    """Where the script calls its model or steps its optimizer, and its name for it there."""

    file: str
    line: int
    source: str
    #: The script's variable bound to the object in that frame (``m``, ``self.model``).
    name: str | None


class ScriptState:
    """Probed once, from the measured steps' hooks (one check of a flag per call after that)."""

    def __init__(self) -> None:
        #: The dtype the model's forward computes in under the script's own ``torch.autocast``.
        self.autocast_dtype: str | None = None
        #: Where the script calls its model: the trainable outermost module with the most
        #: parameters (a GAN's larger model, not an online probe trained beside it).
        self.model: CallSite | None = None
        self.optimizer: CallSite | None = None
        self.optimizer_probed = False
        #: The trainable outermost modules probed (by id), and the model's parameter count.
        self._probed: set[int] = set()
        self._model_size = -1

    def wants_forward(self, module: Any) -> bool:
        """Whether ``module``'s training forward is still to be probed (once per module)."""
        return id(module) not in self._probed

    def probe_forward(self, module: Any, device: torch.device | None) -> None:
        """At the first training call of each trainable outermost module (in the warmup, where
        there is one), on ``device`` (the run's, once known; else its parameters')."""
        self._probed.add(id(module))
        device_type = device.type if device is not None else parameter_device_type(module)
        try:
            if torch.is_autocast_enabled(device_type):
                self.autocast_dtype = str(torch.get_autocast_dtype(device_type)).replace(
                    "torch.", ""
                )
        except (RuntimeError, TypeError):  # a device type autocast does not know
            pass
        size = sum(p.numel() for p in module.parameters())
        if size > self._model_size:
            site = _call_site(module)
            if site is not None:
                self.model, self._model_size = site, size

    def probe_optimizer(self, optimizer: Any) -> None:
        self.optimizer_probed = True
        self.optimizer = _call_site(optimizer)

    def model_name(self) -> str:
        return self.model.name if self.model is not None and self.model.name else "model"

    def optimizer_name(self) -> str:
        found = self.optimizer.name if self.optimizer is not None else None
        return found or "optimizer"


def parameter_device_type(module: Any) -> str:
    """The device type of ``module``'s first parameter (``"cpu"`` without one): the run's
    device is known only from the first optimizer step on, after the warmup's first forward
    (probed on the CPU, a CUDA script's autocast would go unseen)."""
    for parameter in module.parameters():
        return parameter.device.type
    return "cpu"


def call_site(obj: Any = None) -> CallSite | None:
    """The innermost user frame above the caller, and the name ``obj`` has there."""
    return _call_site(obj)


def _call_site(obj: Any) -> CallSite | None:
    """The innermost user frame above the hook, and the name ``obj`` has there."""
    frame = sys._getframe(2)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    filename, line = frame.f_code.co_filename, frame.f_lineno
    name = _name_of(obj, frame) if obj is not None else None
    return CallSite(filename, line, statement_at(filename, line), name)


def _name_of(obj: Any, frame: Any) -> str | None:
    """``obj``'s name in ``frame``: a local or global variable, or an attribute of ``self``."""
    for scope in (frame.f_locals, frame.f_globals):
        for name, value in list(scope.items()):
            if value is obj and not name.startswith("__"):
                return name
    owner = frame.f_locals.get("self")
    if owner is not None:
        for name, value in list(getattr(owner, "__dict__", {}).items()):
            if value is obj:
                return f"self.{name}"
        for name, value in list(getattr(owner, "_modules", {}).items()):
            if value is obj:
                return f"self.{name}"
    return None
