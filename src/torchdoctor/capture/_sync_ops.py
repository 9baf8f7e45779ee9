"""What the sync watcher knows about torch operations: which ones sync, copy or index, how a
call is routed to the watcher's rule for it (:class:`SyncMode`), and the helpers the rules share.

The tables are keyed on torch's own functions and methods. A call of a ``Tensor`` method that the
capture wrapped (``to``, ``cuda``) reaches a function mode as the wrapper; :class:`SyncMode` maps
it back through the watcher's patcher (``Patcher.original``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import (
    TorchFunctionMode,
    _get_current_function_mode_stack,
    _pop_mode,
    _push_mode,
)

from ._frames import Site
from ._patch import call_op

if TYPE_CHECKING:
    from ._sync_watcher import SyncWatcher


@dataclass
class Origin:
    """Where a host-side tensor made inside the watched window came from."""

    kind: str
    op: str
    site: Site
    step: int
    fingerprint: str | None = None
    reported: bool = False
    #: Its tensors (or tensors derived from them) reached the outermost module's forward: the
    #: model's input, built by the script's input pipeline, so never a finding.
    model_input: bool = False
    #: ... and one of them got there still on the host (CPU rule: the run does not move it).
    reached_model_unmoved: bool = False
    #: Its tensors met a device-side tensor in an operation (not moved there): on an
    #: accelerator the fix makes them there, and a sync on what derives from them is one.
    met_device: bool = False

    def makes_syncs(self) -> bool:
        """CPU rule: whether a sync on this origin's tensors counts (see ``events``)."""
        return self.reached_model_unmoved or (self.met_device and self.kind != "batch")


def batch_origin() -> Origin:
    """The origin of batch tensors before they are moved (CPU rule): host-side, never reported."""
    return Origin("batch", "DataLoader", Site("<batch>", 0, ""), 0, reported=True)


T = torch.Tensor

#: Operations that make the host wait for the device, by the kind of finding they give.
SYNC_OPS: dict[Any, str] = {
    T.item: "item",
    T.__float__: "scalar-conversion",
    T.__int__: "scalar-conversion",
    T.__index__: "scalar-conversion",
    T.__complex__: "scalar-conversion",
    T.__bool__: "tensor-branch",  # refined from the source line: if/while, assert or bool()
    T.__contains__: "scalar-conversion",
    torch.is_nonzero: "scalar-conversion",
    torch.equal: "scalar-conversion",
    T.equal: "scalar-conversion",
    torch.allclose: "scalar-conversion",
    T.allclose: "scalar-conversion",
    T.tolist: "tolist",
    T.__repr__: "print-tensor",
    T.__format__: "print-tensor",
    T.numpy: "to-host",
    T.__array__: "to-host",
    torch.nonzero: "nonzero",
    T.nonzero: "nonzero",
    torch.argwhere: "nonzero",
    T.argwhere: "nonzero",
    torch.masked_select: "masked-select",
    T.masked_select: "masked-select",
    torch.unique: "unique",
    T.unique: "unique",
    torch.unique_consecutive: "unique",
    T.unique_consecutive: "unique",
    torch.bincount: "data-dependent-shape",
    T.bincount: "data-dependent-shape",
}
#: Sync only in some call forms; decided by ``_conditional_sync``.
CONDITIONAL_SYNC_OPS = {
    torch.where: "nonzero",
    torch.repeat_interleave: "data-dependent-shape",
    T.repeat_interleave: "data-dependent-shape",
    torch.nn.functional.one_hot: "data-dependent-shape",
}
INDEX_OPS = {T.__getitem__, T.__setitem__}
TO_OPS = {T.to, T.cuda, T.cpu}
#: Factories that copy Python (or NumPy) data into a new tensor.
DATA_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray}
#: Factories that make a tensor from sizes alone; on the host unless given ``device=``.
SIZE_FACTORIES = {
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.arange,
    torch.linspace,
    torch.logspace,
    torch.eye,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.scalar_tensor,
}

_ASSERT_LINE = re.compile(r"assert\b")
_BRANCH_LINE = re.compile(r"(if|elif|while)\b|.*\sif\s")
CPU_LITERAL = re.compile(r"""['"]cpu(:\d+)?['"]""")
#: Larger tensors are not fingerprinted (hashing them would cost more than it tells).
_FINGERPRINT_MAX_NUMEL = 1 << 16


class SyncMode(TorchFunctionMode):
    """Routes each torch call to the watcher's rule for it."""

    def __init__(self, watcher: SyncWatcher) -> None:
        super().__init__()
        self.watcher = watcher

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        w = self.watcher
        if w._patcher is not None:
            # A Tensor method the capture wrapped (``to``, ``cuda``) arrives as the wrapper.
            func = w._patcher.original(func)
        if not w._active:
            return call_op(func, args, kwargs)
        if w._ignore_depth:
            if func in TO_OPS:
                return w._mark_moved_ignored(func, args, kwargs)
            return call_op(func, args, kwargs)
        kind = SYNC_OPS.get(func)
        if kind is not None:
            return w._sync(kind, func, args, kwargs)
        kind = CONDITIONAL_SYNC_OPS.get(func)
        if kind is not None:
            return w._conditional_sync(kind, func, args, kwargs)
        if func in INDEX_OPS:
            return w._index(func, args, kwargs)
        if func in TO_OPS:
            return w._to(func, args, kwargs)
        if func in DATA_FACTORIES or func in SIZE_FACTORIES:
            return w._factory(func, args, kwargs)
        return w._plain(func, args, kwargs)


def remove_function_mode(mode: TorchFunctionMode) -> None:
    """Take ``mode`` off this thread's stack, keeping any modes pushed above it."""
    if not any(m is mode for m in _get_current_function_mode_stack()):
        return
    above = []
    while True:
        popped = _pop_mode()
        if popped is mode:
            break
        above.append(popped)
    for m in reversed(above):
        _push_mode(m)


def refine_kind(kind: str, source: str) -> str:
    """Any sync on an ``assert`` line is the assert; ``bool()`` outside a branch is a conversion."""
    line = source.lstrip()
    if _ASSERT_LINE.match(line):
        return "tensor-assert"
    if kind == "tensor-branch" and not _BRANCH_LINE.match(line):
        return "scalar-conversion"
    return kind


def op_name(func: Any) -> str:
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    module = getattr(func, "__module__", None) or ""
    if qualname.startswith(("TensorBase.", "Tensor.")):
        return "Tensor." + qualname.split(".", 1)[1]
    if qualname.startswith("_VariableFunctionsClass."):
        return "torch." + qualname.split(".", 1)[1]
    name = getattr(func, "__name__", qualname)
    if module.startswith(("torch.nn.functional", "torch._C._nn")):
        return f"F.{name}"
    return f"torch.{name}"


def to_device_type(args: tuple, kwargs: dict) -> str | None:
    """The device type a ``.to(...)`` call targets, or ``None`` for a dtype-only call."""
    for a in (*args, kwargs.get("device")):
        if isinstance(a, torch.device):
            return a.type
        if isinstance(a, str):
            try:
                return torch.device(a).type
            except RuntimeError:
                return None  # let the call itself report the bad device string
        if isinstance(a, int) and not isinstance(a, bool):
            return "cuda"
        if isinstance(a, torch.Tensor):
            return a.device.type
    return None


def is_ndarray(value: Any) -> bool:
    return type(value).__name__ == "ndarray"


def fingerprint(tensor: torch.Tensor, data: Any) -> str | None:
    """A short hash of dtype, shape and values, to see a constant rebuilt step after step."""
    try:
        return _hash_values(tensor, data)
    except Exception:  # quantized, sparse, nested...: no fingerprint rather than a failed step
        return None


def _hash_values(tensor: torch.Tensor, data: Any) -> str | None:
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    if tensor.device.type == "cpu":
        if tensor.numel() > _FINGERPRINT_MAX_NUMEL:
            return None
        flat = tensor.detach().reshape(-1).contiguous()
        h.update(flat.view(torch.uint8).numpy().tobytes())
    elif is_ndarray(data):
        h.update(data.tobytes())
    else:
        # Built straight onto the device: hash the Python data instead of reading the device.
        text = repr(data)
        if len(text) > _FINGERPRINT_MAX_NUMEL * 8:
            return None
        h.update(text.encode())
    return h.hexdigest()
