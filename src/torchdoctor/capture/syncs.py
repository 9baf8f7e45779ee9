"""Record host-device syncs and per-step host-to-device copies, down to the user's line.

:class:`SyncWatcher` pushes a ``TorchFunctionMode`` and, while it is active, three small patches:
``torch.Tensor.__new__`` (the legacy ``torch.Tensor([...])`` constructor) and ``torch.from_numpy``,
which no mode sees, and ``torch.cuda.synchronize``. :meth:`SyncWatcher.stop` undoes all of them.
The events it records are turned into findings by :func:`torchdoctor.analysis.syncs.sync_findings`.

On a CPU run nothing really blocks, so the watcher emulates an accelerator run (the *CPU rule*,
see ``docs/syncs.md``): a tensor is *host-side* when it was made inside the watched window on the
host (from Python data, or by a factory without ``device=``), or derived only from such tensors;
every other tensor (parameters, buffers, the batch once moved, anything computed from them) is
*device-side*. A sync is reported when it reads a device-side tensor; a host-side tensor is
reported as a would-be host-to-device copy when it is moved with ``.to(...)`` or meets a
device-side tensor in an operation.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import (
    TorchFunctionMode,
    _get_current_function_mode_stack,
    _pop_mode,
    _push_mode,
)
from torch.utils.weak import WeakIdKeyDictionary

from torchdoctor._batches import tensors_in
from torchdoctor.analysis.syncs import sync_findings
from torchdoctor.capture._frames import Site, user_site
from torchdoctor.capture._patch import Patcher
from torchdoctor.record import Finding


@dataclass
class SyncEvent:
    """One operation in the step that syncs with the device or copies host data to it."""

    kind: str
    #: The torch operation, e.g. ``Tensor.item`` or ``torch.tensor``.
    op: str
    file: str | None
    line: int | None
    source: str | None
    #: Index of the training step (0 from :meth:`SyncWatcher.start`, +1 per ``mark_step``).
    step: int
    #: Wall time of the blocking call on an accelerator run; ``None`` where not measured.
    duration_ns: int | None = None
    #: For tensors built from Python data: a hash of dtype, shape and values.
    fingerprint: str | None = None
    #: ``file:line`` of the library frame that made the call, when a library made it.
    via: str | None = None
    #: For host tensors: ``file:line`` where the tensor went to (or met) the device.
    used_at: str | None = None


@dataclass
class _Origin:
    """Where a host-side tensor made inside the watched window came from."""

    kind: str
    op: str
    site: Site
    step: int
    fingerprint: str | None = None
    reported: bool = False


#: Origin of batch tensors before they are moved (CPU rule): host-side, never reported.
_BATCH = _Origin("batch", "DataLoader", Site("<batch>", 0, ""), 0, reported=True)

T = torch.Tensor

#: Operations that make the host wait for the device, by the kind of finding they give.
_SYNC_OPS: dict[Any, str] = {
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
_CONDITIONAL_SYNC_OPS = {
    torch.where: "nonzero",
    torch.repeat_interleave: "data-dependent-shape",
    T.repeat_interleave: "data-dependent-shape",
    torch.nn.functional.one_hot: "data-dependent-shape",
}
_INDEX_OPS = {T.__getitem__, T.__setitem__}
_TO_OPS = {T.to, T.cuda, T.cpu}
#: Factories that copy Python (or NumPy) data into a new tensor.
_DATA_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray}
#: Factories that make a tensor from sizes alone; on the host unless given ``device=``.
_SIZE_FACTORIES = {
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
_CPU_LITERAL = re.compile(r"""['"]cpu(:\d+)?['"]""")
#: Larger tensors are not fingerprinted (hashing them would cost more than it tells).
_FINGERPRINT_MAX_NUMEL = 1 << 16


class SyncWatcher:
    """Records syncs and host-to-device copies made by the code that runs while it is active.

    ``start()`` and ``stop()`` may be called from different call stacks (e.g. from two hook
    calls) as long as it is the same thread; ``stop()`` is idempotent and always removes what
    ``start()`` installed, even if the code in between raised or pushed modes of its own.

    Args:
        on_accelerator: whether the run uses an accelerator. ``None`` picks ``True`` when CUDA
            is available. ``False`` applies the CPU rule (module docstring).
        is_batch_tensor: optional callback telling which tensors are batches as the DataLoader
            yielded them; they count as host-side until ``.to(...)``/``.cuda()`` is called on
            them, and moving them is never a finding (it is the run's "to device" part).
    """

    def __init__(
        self,
        on_accelerator: bool | None = None,
        is_batch_tensor: Callable[[torch.Tensor], bool] | None = None,
        patcher: Patcher | None = None,
    ) -> None:
        if on_accelerator is None:
            on_accelerator = torch.cuda.is_available()
        self.on_accelerator = on_accelerator
        self.is_batch_tensor = is_batch_tensor
        self.events: list[SyncEvent] = []
        self._step = 0
        self._active = False
        self._ignore_depth = 0
        self._thread: int | None = None
        self._mode: _SyncMode | None = None
        self._given_patcher = patcher
        self._patcher: Patcher | None = None
        self._host: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._moved: WeakIdKeyDictionary = WeakIdKeyDictionary()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SyncWatcher:
        """Install the mode and patches and begin step 0. A second call does nothing."""
        if self._mode is not None:
            return self
        self._thread = threading.get_ident()
        if any(e.step == self._step for e in self.events):
            self._step += 1  # a restart after an unmarked step: that step is over
        self._patcher = self._given_patcher or Patcher.for_process()
        try:
            self._patch_tensor_new()
            self._patch_cuda_synchronize()
            self._patch_from_numpy()
            self._mode = _SyncMode(self)
            _push_mode(self._mode)
        except BaseException:
            self.stop()
            raise
        self._active = True
        return self

    def stop(self) -> None:
        """Remove the mode and undo every patch. Safe to call twice or without ``start()``."""
        self._active = False
        mode, self._mode = self._mode, None
        if mode is not None:
            if threading.get_ident() != self._thread:
                warnings.warn(
                    "SyncWatcher.stop() called on another thread than start(): its (now "
                    "inactive) mode stays on the starting thread's mode stack",
                    RuntimeWarning,
                    stacklevel=2,
                )
            _remove_function_mode(mode)
        if self._patcher is not None:
            self._patcher.restore()

    def __enter__(self) -> SyncWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def mark_step(self) -> None:
        """End the current step: events from now on get the next step index.

        Call it at each step boundary while watching (the runner: each optimizer step);
        ``steps`` counts the calls, plus a trailing step that recorded events.
        """
        self._step += 1

    @property
    def step(self) -> int:
        """Index of the step being recorded."""
        return self._step

    @property
    def steps(self) -> int:
        """Steps recorded: completed ``mark_step()`` calls, plus a trailing step with events."""
        partial = any(e.step == self._step for e in self.events)
        return max(1, self._step + (1 if partial else 0))

    @contextlib.contextmanager
    def ignore(self) -> Iterator[None]:
        """Exclude the block's operations (e.g. the runner's own work) from the record."""
        self._ignore_depth += 1
        try:
            yield
        finally:
            self._ignore_depth -= 1

    def findings(self, steps: int | None = None) -> list[Finding]:
        """The events so far as findings (see :func:`~torchdoctor.analysis.syncs.sync_findings`)."""
        return sync_findings(self.events, steps or self.steps, self.on_accelerator)

    # -- patches -----------------------------------------------------------------------------

    def _patch_tensor_new(self) -> None:
        """See ``torch.Tensor([...])``: the legacy constructor reaches no torch function mode."""
        inner = torch.Tensor.__new__
        watcher = self

        def tensor_new(cls: type, *args: Any, **kwargs: Any) -> Any:
            tensor = inner(cls, *args, **kwargs)
            if cls is torch.Tensor and watcher._recording_here():
                watcher._on_legacy_constructor(tensor, args)
            return tensor

        self._patcher.set(torch.Tensor, "__new__", tensor_new)

    def _patch_cuda_synchronize(self) -> None:
        original = torch.cuda.synchronize
        watcher = self

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            if not watcher._recording_here():
                return original(*args, **kwargs)
            site = user_site()
            start_ns = time.perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                if site is not None:
                    watcher._emit(
                        "cuda-synchronize",
                        "torch.cuda.synchronize",
                        site,
                        duration_ns=watcher._measured(start_ns),
                    )

        self._patcher.set(torch.cuda, "synchronize", synchronize)

    def _patch_from_numpy(self) -> None:
        """See ``torch.from_numpy``: like the legacy constructor, no torch function mode does."""
        original = torch.from_numpy
        watcher = self

        def from_numpy(array: Any) -> torch.Tensor:
            tensor = original(array)
            if watcher._recording_here():
                watcher._on_host_data(tensor, array, "torch.from_numpy")
            return tensor

        self._patcher.set(torch, "from_numpy", from_numpy)

    # -- recording ---------------------------------------------------------------------------

    def _recording_here(self) -> bool:
        return self._active and not self._ignore_depth and threading.get_ident() == self._thread

    def _measured(self, start_ns: int) -> int | None:
        """Elapsed time since ``start_ns``, kept only where the wait is real (accelerator runs)."""
        return time.perf_counter_ns() - start_ns if self.on_accelerator else None

    def _emit(
        self,
        kind: str,
        op: str,
        site: Site,
        *,
        step: int | None = None,
        duration_ns: int | None = None,
        fingerprint: str | None = None,
        used_at: str | None = None,
    ) -> None:
        self.events.append(
            SyncEvent(
                kind=kind,
                op=op,
                file=site.file,
                line=site.line,
                source=site.source,
                step=self._step if step is None else step,
                duration_ns=duration_ns,
                fingerprint=fingerprint,
                via=site.via,
                used_at=used_at,
            )
        )

    def _device_side(self, t: torch.Tensor) -> bool:
        """Would ``t`` live on the accelerator? (The CPU rule applies on CPU runs.)"""
        device_type = t.device.type
        if device_type == "meta":
            return False
        if device_type != "cpu":
            return True
        if self.on_accelerator:
            return False
        if t in self._moved:
            return True
        return self._host_origin(t) is None

    def _report_origin(
        self, origin: _Origin, duration_ns: int | None = None, used: Site | None = None
    ) -> None:
        """Emit a host tensor's creation site once, when it first goes to the device."""
        if origin.reported:
            return
        origin.reported = True
        self._emit(
            origin.kind,
            origin.op,
            origin.site,
            step=origin.step,
            duration_ns=duration_ns,
            fingerprint=origin.fingerprint,
            used_at=f"{used.file}:{used.line}" if used is not None else None,
        )

    def _track_host(self, tensors: list[torch.Tensor], origin: _Origin) -> None:
        for t in tensors:
            if t.device.type == "cpu" and t not in self._moved:
                self._host[t] = origin

    def _on_legacy_constructor(self, tensor: torch.Tensor, args: tuple[Any, ...]) -> None:
        """Track ``torch.Tensor(...)`` made in the step: from a list it is Python data."""
        data = args[0] if len(args) == 1 else None
        if isinstance(data, torch.Tensor):
            return
        from_data = data is not None and not isinstance(data, (int, torch.Size))
        self._on_host_data(tensor, data if from_data else None, "torch.Tensor")

    def _on_host_data(self, tensor: torch.Tensor, data: Any, op: str) -> None:
        """Track a host tensor made in the step outside any mode's view; ``data`` if from data."""
        self._ignore_depth += 1  # the fingerprint's own tensor calls are not the user's
        try:
            site = user_site()
            if site is None:
                return
            origin = _Origin(
                "tensor-from-python-data" if data is not None else "host-tensor-to-device",
                op,
                site,
                self._step,
                _fingerprint(tensor, data) if data is not None else None,
            )
            self._host[tensor] = origin
        finally:
            self._ignore_depth -= 1

    # -- the rules, called by _SyncMode for the operations in the tables above ---------------

    def _host_origin(self, t: torch.Tensor) -> _Origin | None:
        """The origin of a host-side tensor (a batch not yet moved has a silent one)."""
        origin = self._host.get(t)
        if origin is None and self.is_batch_tensor is not None and not self.on_accelerator:
            if t.device.type == "cpu" and t not in self._moved and self.is_batch_tensor(t):
                return _BATCH
        return origin

    def _plain(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run an ordinary operation; carry host-ness through it or catch host data meeting the
        device."""
        if not self._host and (self.is_batch_tensor is None or self.on_accelerator):
            return func(*args, **kwargs)
        inputs = tensors_in((args, kwargs), attributes=False, depth=3)
        host = [(t, o) for t in inputs if (o := self._host_origin(t)) is not None]
        if not host:
            return func(*args, **kwargs)
        host_ids = {id(t) for t, _ in host}
        meets_device = any(self._device_side(t) for t in inputs if id(t) not in host_ids)
        if not meets_device:
            out = func(*args, **kwargs)
            self._track_host(tensors_in(out, attributes=False, depth=3), host[0][1])
            return out
        start_ns = time.perf_counter_ns()
        out = func(*args, **kwargs)
        duration_ns = self._measured(start_ns)
        used = None
        for t, origin in host:
            # A 0-dim host tensor is passed to device kernels as a scalar: no copy.
            if t.dim() > 0 and not origin.reported:
                used = used or user_site()
                self._report_origin(origin, duration_ns, used)
        return out

    def _sync(self, kind: str, func: Any, args: tuple, kwargs: dict) -> Any:
        subjects = [
            t for t in tensors_in(args[:2], attributes=False, depth=3) if self._device_side(t)
        ]
        if not subjects:
            return self._plain(func, args, kwargs)
        site = user_site()
        if site is None:
            return self._plain(func, args, kwargs)
        start_ns = time.perf_counter_ns()
        out = func(*args, **kwargs)
        self._emit(
            _refine_kind(kind, site.source),
            _op_name(func),
            site,
            duration_ns=self._measured(start_ns),
        )
        return out

    def _conditional_sync(self, kind: str, func: Any, args: tuple, kwargs: dict) -> Any:
        if func is torch.where:
            syncs = len(args) + len(kwargs) == 1
        elif func is torch.nn.functional.one_hot:
            classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
            syncs = classes == -1
        else:  # repeat_interleave: a tensor of repeats without output_size
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
            syncs = isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None
        if syncs:
            return self._sync(kind, func, args, kwargs)
        return self._plain(func, args, kwargs)

    def _index(self, func: Any, args: tuple, kwargs: dict) -> Any:
        x, index = args[0], args[1]
        parts = index if isinstance(index, tuple) else (index,)
        kind = None
        if any(isinstance(p, (range, list)) or _is_ndarray(p) for p in parts):
            kind = "python-index"
        elif any(
            isinstance(p, torch.Tensor) and p.dtype in (torch.bool, torch.uint8) for p in parts
        ):
            kind = "boolean-mask-index"
        if kind is None or not self._device_side(x):
            return self._plain(func, args, kwargs)
        site = user_site()
        if site is None:
            return self._plain(func, args, kwargs)
        start_ns = time.perf_counter_ns()
        out = self._plain(func, args, kwargs)
        self._emit(kind, _op_name(func), site, duration_ns=self._measured(start_ns))
        return out

    def _to(self, func: Any, args: tuple, kwargs: dict) -> Any:
        src = args[0]
        if func is T.cpu:
            target, to_host = "cpu", True
        elif func is T.cuda:
            target, to_host = "cuda", False
        else:
            target, to_host = _to_device_type(args[1:], kwargs), False
        if target is None:  # a dtype change only
            return self._plain(func, args, kwargs)
        emulating = not self.on_accelerator
        if emulating and target == "cpu" and not to_host:
            # On a CPU run `.to(device)` names the stand-in for the accelerator, unless the line
            # spells out "cpu".
            site = user_site()
            to_host = site is not None and bool(_CPU_LITERAL.search(site.source))
        is_batch = self.is_batch_tensor is not None and self.is_batch_tensor(src)
        origin = self._host.get(src)
        start_ns = time.perf_counter_ns()
        out = func(*args, **kwargs)
        duration_ns = self._measured(start_ns)
        if emulating:
            leaves_device = to_host
        else:
            leaves_device = target == "cpu" and src.device.type != "cpu"
        if leaves_device:
            if self._device_side(src):
                site = user_site()
                if site is not None:
                    self._emit("to-host", _op_name(func), site, duration_ns=duration_ns)
            return out
        if (emulating or out.device.type != "cpu") and isinstance(out, torch.Tensor):
            if origin is not None:
                self._report_origin(origin, duration_ns, user_site())
            if emulating and (origin is not None or is_batch):
                self._host.pop(out, None)
                self._moved[out] = True
        return out

    def _factory(self, func: Any, args: tuple, kwargs: dict) -> Any:
        from_data = func in _DATA_FACTORIES
        data = (args[0] if args else kwargs.get("data")) if from_data else None
        if from_data and isinstance(data, torch.Tensor):
            return self._plain(func, args, kwargs)
        start_ns = time.perf_counter_ns()
        out = func(*args, **kwargs)
        duration_ns = self._measured(start_ns)
        if not isinstance(out, torch.Tensor):
            return out
        site = user_site()
        if site is None:
            return out
        if self.on_accelerator:
            on_device = out.device.type != "cpu"
        else:
            on_device = kwargs.get("device") is not None and not _CPU_LITERAL.search(site.source)
        if on_device and not from_data:
            return out  # made on the device: nothing was copied
        origin = _Origin(
            "tensor-from-python-data" if from_data else "host-tensor-to-device",
            _op_name(func),
            site,
            self._step,
            _fingerprint(out, data) if from_data else None,
        )
        if on_device:  # built from Python data straight onto the device: a copy now
            self._report_origin(origin, duration_ns, site)
        else:
            self._host[out] = origin
        return out

    def _mark_moved_ignored(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Inside ``ignore()``: still note that a batch was moved (CPU rule)."""
        out = func(*args, **kwargs)
        if (
            not self.on_accelerator
            and func is not T.cpu
            and isinstance(out, torch.Tensor)
            and (func is T.cuda or _to_device_type(args[1:], kwargs) is not None)
        ):
            self._host.pop(out, None)
            self._moved[out] = True
        return out


class _SyncMode(TorchFunctionMode):
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
            return func(*args, **kwargs)
        if w._ignore_depth:
            if func in _TO_OPS:
                return w._mark_moved_ignored(func, args, kwargs)
            return func(*args, **kwargs)
        kind = _SYNC_OPS.get(func)
        if kind is not None:
            return w._sync(kind, func, args, kwargs)
        kind = _CONDITIONAL_SYNC_OPS.get(func)
        if kind is not None:
            return w._conditional_sync(kind, func, args, kwargs)
        if func in _INDEX_OPS:
            return w._index(func, args, kwargs)
        if func in _TO_OPS:
            return w._to(func, args, kwargs)
        if func in _DATA_FACTORIES or func in _SIZE_FACTORIES:
            return w._factory(func, args, kwargs)
        return w._plain(func, args, kwargs)


def _remove_function_mode(mode: TorchFunctionMode) -> None:
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


def _refine_kind(kind: str, source: str) -> str:
    """Any sync on an ``assert`` line is the assert; ``bool()`` outside a branch is a conversion."""
    line = source.lstrip()
    if _ASSERT_LINE.match(line):
        return "tensor-assert"
    if kind == "tensor-branch" and not _BRANCH_LINE.match(line):
        return "scalar-conversion"
    return kind


def _op_name(func: Any) -> str:
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


def _to_device_type(args: tuple, kwargs: dict) -> str | None:
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


def _is_ndarray(value: Any) -> bool:
    return type(value).__name__ == "ndarray"


def _fingerprint(tensor: torch.Tensor, data: Any) -> str | None:
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
    elif _is_ndarray(data):
        h.update(data.tobytes())
    else:
        # Built straight onto the device: hash the Python data instead of reading the device.
        text = repr(data)
        if len(text) > _FINGERPRINT_MAX_NUMEL * 8:
            return None
        h.update(text.encode())
    return h.hexdigest()


@dataclass
class SyncWatch:
    """What :func:`watch_syncs` yields; ``findings`` is filled when the block exits."""

    watcher: SyncWatcher
    findings: list[Finding] = field(default_factory=list)

    @property
    def events(self) -> list[SyncEvent]:
        return self.watcher.events

    def mark_step(self) -> None:
        """Count a step boundary, so repeated constants and calls per step are seen."""
        self.watcher.mark_step()


@contextlib.contextmanager
def watch_syncs(on_accelerator: bool | None = None) -> Iterator[SyncWatch]:
    """Find syncs and host-to-device copies made inside a ``with`` block.

    Args:
        on_accelerator: as for :class:`SyncWatcher`; ``None`` means "CUDA is available".

    Yields:
        A :class:`SyncWatch`; its ``findings`` list is filled on exit, even if the block raised.

    Example::

        with torchdoctor.watch_syncs() as watch:
            loss = my_loss(logits, target)
        assert not watch.findings, watch.findings
    """
    watcher = SyncWatcher(on_accelerator=on_accelerator)
    watch = SyncWatch(watcher)
    watcher.start()
    try:
        yield watch
    finally:
        watcher.stop()
        watch.findings[:] = watcher.findings()


def find_syncs(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Finding]:
    """Call ``fn(*args, **kwargs)`` once and return the syncs and copies it makes.

    The run counts as an accelerator run when an argument (or a parameter of ``fn``, if it is a
    module) is on an accelerator; otherwise the CPU rule applies, also on a machine with a GPU:
    tensors that exist before the call count as device-side (see ``docs/syncs.md``).

    Returns:
        Findings, most costly first; empty when ``fn`` keeps its work on the device.
    """
    tensors = tensors_in((args, kwargs), attributes=False, depth=3)
    if isinstance(fn, torch.nn.Module):
        tensors += list(fn.parameters()) + list(fn.buffers())
    on_accelerator = any(t.device.type not in ("cpu", "meta") for t in tensors)
    with watch_syncs(on_accelerator=on_accelerator) as watch:
        fn(*args, **kwargs)
    return watch.findings
