"""One step's memory by kind: parameters, gradients, optimizer state, the activations the forward
saves for backward (by the block that saved them), and on a device with allocator statistics the
step's peak (docs/memory.md).

:class:`MemoryWatch` is lent by the sync finder's first untimed step: autograd's saved-tensor
hooks see each tensor the forward keeps for backward (their pack hook returns the tensor itself:
nothing the script computes changes), global module hooks say which module was running, and at
the step's end the parameters, their gradients and the optimizers' state are summed. Exact
byte counts, each storage once while it lives (an address freed and taken again by a later
micro-batch's tensor is that tensor's, counted anew; a buffer's storage, saved through a new view
every micro-batch, is counted once); no timing is read.
"""

from __future__ import annotations

import inspect
import os
import weakref
from typing import Any

import torch

from .._devices import peak_memory_mb, reset_peak_memory
from ..record import MemorySplit, ModuleMemory
from ._frames import is_user_file
from ._held import held_by_category

#: Where a tensor saved outside every module's forward goes (a loss of functional ops).
OUTSIDE = "outside any module"
#: The blocks kept in the split, largest first.
LARGEST = 5
_MB = 1024 * 1024
#: Containers whose children are the blocks (``layers.3``, not ``layers``).
_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)
_INDEXED = (torch.nn.ModuleList, torch.nn.Sequential)


class MemoryWatch:
    """Counts one step; :meth:`start` before it, :meth:`stop` at its end (same thread)."""

    def __init__(self, roots: list[torch.nn.Module], device: torch.device | None) -> None:
        self.roots = roots
        self.device = device
        #: Each module of the roots: its root and its name there.
        self._names: dict[int, tuple[torch.nn.Module, str]] = {}
        self._blocks: dict[int, tuple[str, torch.nn.Module]] = {}
        self._stack: list[torch.nn.Module] = []
        #: Saved storages by address, each with a weak reference to its storage: an address
        #: whose storage is gone was freed, and a tensor found there later is new (a view of a
        #: buffer that lives on, saved again, is not).
        self._seen: dict[int, Any] = {}
        self._params: set[int] = set()
        #: Bytes saved for backward, by block label; the block's module by label.
        self.saved: dict[str, int] = {}
        self._block_modules: dict[str, torch.nn.Module] = {}
        self._handles: list[Any] = []
        self._hooks: Any = None
        self._at_start: int | None = None
        #: Saved tensors whose storage could not be read (a tensor subclass): not counted.
        self.unread = 0
        #: Samples in the step's batch (the outermost module's first tensor input's first dim).
        self.rows: int | None = None
        #: Bytes saved when the first backward read a saved tensor (the first pass's).
        self.first_pass: int | None = None
        #: Outermost modules that train (from start): more than one names each block's model.
        self._models = 0

    def start(self) -> None:
        self._models = sum(any(p.requires_grad for p in r.parameters()) for r in self.roots)
        for root in self.roots:
            for name, module in root.named_modules():
                self._names.setdefault(id(module), (root, name))
            self._params.update(_storage(p) for p in root.parameters())
        self._params.discard(0)
        register = torch.nn.modules.module
        self._handles = [
            register.register_module_forward_pre_hook(self._entered),
            register.register_module_forward_hook(self._left),
        ]
        self._handles += [  # the batch: its inputs' keywords too (`model(**batch)`)
            root.register_forward_pre_hook(self._batch, with_kwargs=True) for root in self.roots
        ]
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        if self.device is not None and reset_peak_memory(self.device):
            self._at_start = _allocated(self.device)

    def stop(self, optimizers: list[Any]) -> MemorySplit | None:
        """The step's split (``None`` when :meth:`start` never ran); undoes every hook."""
        if self._hooks is None:
            return None
        self.close()
        try:
            return self._split(optimizers)
        except Exception:  # noqa: BLE001 - what cannot be counted is not told, never the script's
            return None

    def _split(self, optimizers: list[Any]) -> MemorySplit:
        params = [p for root in self.roots for p in root.parameters()]
        peak = None
        if self.device is not None and self._at_start is not None:
            mb = peak_memory_mb(self.device)
            peak = int(mb * _MB) if mb is not None else None
        device = str(params[0].device) if params else "cpu"
        # what an out-of-memory ending tells by category, counted the same way
        held = held_by_category(self.roots, optimizers, "host" if device == "cpu" else "device")
        return MemorySplit(
            parameters=held["parameters"],
            gradients=held["gradients"],
            optimizer_state=held["optimizer state"],
            activations=sum(self.saved.values()),
            largest=self._largest(),
            device=device,
            peak=peak,
            at_start=self._at_start if peak is not None else None,
            rows=self.rows,
            first_pass=self.first_pass,
        )

    def close(self) -> None:
        """Remove the hooks (every ending); idempotent."""
        hooks, self._hooks = self._hooks, None
        if hooks is not None:
            hooks.__exit__(None, None, None)
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- the hooks ------------------------------------------------------------------------------

    def _entered(self, module: torch.nn.Module, args: Any) -> None:
        if id(module) in self._names:
            self._stack.append(module)

    def _batch(self, module: torch.nn.Module, args: Any, kwargs: Any = None) -> None:
        # kwargs may be missing: removed while torch runs the module's pre-hooks (the step
        # ended in an earlier one), torch calls it as a hook without them
        if self.rows is None and self._hooks is not None:
            inputs = [*args, *(kwargs or {}).values()]
            first = next((a for a in inputs if isinstance(a, torch.Tensor) and a.dim()), None)
            self.rows = int(first.shape[0]) if first is not None else None

    def _left(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._stack and self._stack[-1] is module:
            self._stack.pop()

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        try:
            with torch._C.DisableTorchFunction():  # the sync finder's mode need not see them
                key = _storage(tensor)
                known = self._seen.get(key)
                if key and (known is None or known() is None) and key not in self._params:
                    storage = tensor.untyped_storage()
                    self._seen[key] = weakref.ref(storage)
                    label = self._block(self._stack[-1]) if self._stack else OUTSIDE
                    nbytes = storage.nbytes()
                    self.saved[label] = self.saved.get(label, 0) + nbytes
        except Exception:  # noqa: BLE001 - a tensor we cannot read is not the script's error
            self.unread += 1
        return tensor

    def _unpack(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.first_pass is None:  # the step's first backward began: the first pass's bytes
            self.first_pass = sum(self.saved.values())
        return tensor

    def _block(self, module: torch.nn.Module) -> str:
        """The block a module belongs to: its outermost module's child (a container's child:
        ``layers.3``), labelled by its name there (the root's class name for the root)."""
        known = self._blocks.get(id(module))
        if known is not None:
            return known[0]
        root, name = self._names[id(module)]
        label, block = block_of(root, name)
        if self._models > 1 and block is not root:  # a GAN's two models (no loss, no teacher)
            label = f"{type(root).__name__}.{label}"
        self._blocks[id(module)] = (label, block)
        self._block_modules.setdefault(label, block)
        return label

    def _largest(self) -> list[ModuleMemory]:
        ranked = sorted(self.saved.items(), key=lambda kv: -kv[1])[:LARGEST]
        out = []
        for label, nbytes in ranked:
            module = self._block_modules.get(label)
            kind = type(module).__name__ if module is not None else ""
            out.append(ModuleMemory(label, kind, _defined_at(module), nbytes))
        return out


def block_of(root: torch.nn.Module, name: str) -> tuple[str, torch.nn.Module]:
    """The block the module called ``name`` in ``root`` belongs to, and its label: the root's
    child, or a container's child (``layers.3`` of a ``ModuleList``, an encoder's ``layers.0``);
    the root itself, labelled by its class name, for the root's own name (``""``). A block's
    own containers (a GPT block's ``mlp = Sequential(...)``) stay in it, and a container that is
    one element of a list of them (``layers[0] = Sequential(Linear, ReLU, Linear)``) is a block."""
    parts = name.split(".") if name else []
    block: Any = root
    if parts[:1] == ["_orig_mod"]:  # a torch.compile'd model: named as the model it wraps
        block, parts = root._orig_mod, parts[1:]
        if not parts:
            return type(block).__name__, block
    depth, wrapped = 0, False
    for i, part in enumerate(parts):
        parent = block
        block, depth = getattr(block, part), depth + 1
        if isinstance(block, _CONTAINERS) and not isinstance(parent, _INDEXED):
            continue
        following = getattr(block, parts[i + 1], None) if i + 1 < len(parts) else None
        # into a module that wraps a stack of layers (an encoder's layers), once
        if wrapped or not _stack(following):
            break
        wrapped = True
    return ".".join(parts[:depth]) or type(getattr(root, "_orig_mod", root)).__name__, block


def _stack(module: Any) -> bool:
    """A container of two or more layers of one class (an encoder's layers), not a block's own
    mixed ``Sequential(Linear, GELU, Linear)``."""
    if not isinstance(module, _CONTAINERS):
        return False
    kinds = [type(child) for child in module.children()]
    return len(kinds) >= 2 and len(set(kinds)) == 1


def _storage(tensor: torch.Tensor) -> int:
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - a tensor without storage (a subclass: DTensor's shards)
        return 0


def _defined_at(module: torch.nn.Module | None) -> str | None:
    """Where the module's class is defined (``model.py:12``), when Python can tell."""
    if module is None or not is_user_file(inspect.getfile(type(module))):
        return None  # torch's own classes: their file says nothing of the user's model
    try:
        path = inspect.getsourcefile(type(module))
        _, line = inspect.getsourcelines(type(module))
    except (OSError, TypeError):
        return None
    return f"{os.path.basename(path)}:{line}" if path else None


def _allocated(device: torch.device) -> int | None:
    for owner in (getattr(torch, "accelerator", None), getattr(torch, device.type, None)):
        allocated = getattr(owner, "memory_allocated", None)
        if allocated is not None:
            try:
                return int(allocated(device))
            except (RuntimeError, NotImplementedError, TypeError, AttributeError):
                continue
    return None
