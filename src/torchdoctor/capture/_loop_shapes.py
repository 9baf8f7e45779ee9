"""Loops of an unusual shape, as the hooks meet them: a model run through its ``forward()``
method (no module hook fires: the modules an optimizer trains are found and their ``forward``
timed), and backward calls that never change a parameter (a loop that trains nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..record import Finding


def never_updates_finding(site: Any) -> Finding:
    """A loop whose backward calls never change a parameter: it trains nothing."""
    return Finding(
        kind="loop.never-updates",
        title="parameters never change: no optimizer.step() and no in-place update after the "
        "backward calls",
        fix="# build an optimizer and step it after the backward, or update the parameters\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "loss.backward()\n"
        "optimizer.step()\n"
        "optimizer.zero_grad()",
        file=site.file if site is not None else None,
        line=site.line if site is not None else None,
        source=site.source if site is not None else None,
        severity="critical",
    )


def trained_modules(optimizer: Any) -> list[Any]:
    """The outermost modules all of whose trainable parameters ``optimizer`` updates.

    Found once per optimizer, among the live modules (a walk of the garbage collector's objects).
    """
    import gc

    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    candidates = []
    module_type = torch.nn.Module
    for obj in gc.get_objects():
        # issubclass of the type: isinstance would read ``__class__``, a property on some
        # lazily deprecated objects that warns
        if issubclass(type(obj), module_type):
            own = [id(p) for p in obj.parameters() if p.requires_grad]
            if own and all(i in params for i in own):
                candidates.append(obj)
    inner = {id(m) for c in candidates for m in c.modules() if m is not c}
    return [m for m in candidates if id(m) not in inner]


def forward_timed_by(hooks: Any, module: Any) -> Callable[..., Any]:
    forward = module.forward

    def timed_forward(*args, **kwargs):
        hooks.forward_pre(module, args)
        try:
            return forward(*args, **kwargs)
        finally:
            hooks.forward_post(module, args, None)

    return timed_forward
