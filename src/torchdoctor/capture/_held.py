"""What the script's training held when it ran out of memory, by category: its parameters, their
gradients and the optimizer's state, on the memory that ran out (a device's, or the host's).

Read once, after the error, from the objects the script still holds (the traceback keeps its
frames, and with them its model and optimizer): the rest of what the memory held was activations
and temporaries, which no object names after the step unwound.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def held_by_category(
    modules: Iterable[torch.nn.Module], optimizers: Iterable[Any], memory: str
) -> dict[str, int]:
    """Bytes of ``parameters``, ``gradients`` and ``optimizer state`` on ``memory`` (``"host"``:
    the CPU's tensors; ``"device"``: every other device's), each tensor counted once."""
    seen: set[int] = set()
    held = {"parameters": 0, "gradients": 0, "optimizer state": 0}

    def add(category: str, tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor) or id(tensor) in seen:
            return
        seen.add(id(tensor))
        local = getattr(tensor, "to_local", None)  # an FSDP2 parameter: this rank's shard
        tensor = local() if callable(local) else tensor
        if (tensor.device.type == "cpu") != (memory == "host") or tensor.device.type == "meta":
            return
        held[category] += tensor.numel() * tensor.element_size()

    parameters = [p for m in modules for p in m.parameters()]
    for optimizer in optimizers:
        for group in getattr(optimizer, "param_groups", []):
            parameters.extend(group.get("params", []))
        for state in getattr(optimizer, "state", {}).values():
            for value in state.values() if isinstance(state, dict) else ():
                add("optimizer state", value)
    for parameter in parameters:
        add("parameters", parameter)
        add("gradients", parameter.grad)
    return held
