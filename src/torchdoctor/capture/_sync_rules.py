"""The CPU rule and the sync rules: what each routed torch call means for the watcher's record.

A mixin of :class:`~._sync_watcher.SyncWatcher` (it reads and writes the watcher's state); kept
apart so the rules read as one page. See ``docs/syncs.md`` for the rules in words.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from .._batches import tensors_in
from ._frames import Site, user_site
from ._patch import call_op
from ._sync_ops import (
    CPU_LITERAL,
    DATA_FACTORIES,
    Origin,
    T,
    fingerprint,
    is_ndarray,
    op_name,
    refine_kind,
    to_device_type,
)


class SyncRules:
    """The watcher's rules; :class:`~._sync_watcher.SyncWatcher` holds the state they use."""

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
        self, origin: Origin, duration_ns: int | None = None, used: Site | None = None
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
            origin=origin,
        )

    def _track_host(self, tensors: list[torch.Tensor], origin: Origin) -> None:
        for t in tensors:
            if t.device.type == "cpu" and t not in self._moved:
                self._host[t] = origin

    # -- the rules, called by SyncMode for the operations in the tables above ---------------

    def _host_origin(self, t: torch.Tensor) -> Origin | None:
        """The origin of a host-side tensor (a batch not yet moved has a silent one)."""
        origin = self._host.get(t)
        if origin is None and self.is_batch_tensor is not None and not self.on_accelerator:
            if t.device.type == "cpu" and t not in self._moved and self.is_batch_tensor(t):
                return self._batch
        return origin

    def _pending(self, tensors: list[torch.Tensor]) -> tuple[Origin, ...]:
        """CPU rule: the origins of host tensors a sync reads; it counts if one becomes an
        unmoved model input (see ``SyncWatcher.kept_events``)."""
        if self.on_accelerator:
            return ()
        found: dict[int, Origin] = {}
        for t in tensors:
            origin = self._host_origin(t)
            if origin is not None:
                found.setdefault(id(origin), origin)
        return tuple(found.values())

    def _emit_sync(self, kind: str, func: Any, args: tuple, kwargs: dict, pending=()) -> Any:
        """Run a sync operation and record it at the user's line (``pending``: CPU rule)."""
        site = user_site()
        if site is None:
            return self._plain(func, args, kwargs)
        start_ns = time.perf_counter_ns()
        out = self._plain(func, args, kwargs) if pending else call_op(func, args, kwargs)
        self._emit(
            refine_kind(kind, site.source),
            op_name(func),
            site,
            duration_ns=self._measured(start_ns),
            pending=pending,
        )
        return out

    def _plain(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run an ordinary operation; carry host-ness through it or catch host data meeting the
        device."""
        if not self._host and (self.is_batch_tensor is None or self.on_accelerator):
            return call_op(func, args, kwargs)
        inputs = tensors_in((args, kwargs), attributes=False, depth=3)
        host = [(t, o) for t in inputs if (o := self._host_origin(t)) is not None]
        if not host:
            return call_op(func, args, kwargs)
        host_ids = {id(t) for t, _ in host}
        meets_device = any(self._device_side(t) for t in inputs if id(t) not in host_ids)
        if not meets_device:
            out = call_op(func, args, kwargs)
            self._track_host(tensors_in(out, attributes=False, depth=3), host[0][1])
            return out
        start_ns = time.perf_counter_ns()
        out = call_op(func, args, kwargs)
        duration_ns = self._measured(start_ns)
        used = None
        for t, origin in host:
            # A 0-dim host tensor is passed to device kernels as a scalar: no copy.
            if t.dim() > 0:
                origin.met_device = True
                if not origin.reported:
                    used = used or user_site()
                    self._report_origin(origin, duration_ns, used)
        return out

    def _sync(self, kind: str, func: Any, args: tuple, kwargs: dict) -> Any:
        read = tensors_in(args[:2], attributes=False, depth=3)
        if any(self._device_side(t) for t in read):
            return self._emit_sync(kind, func, args, kwargs)
        pending = self._pending(read)
        if pending:
            return self._emit_sync(kind, func, args, kwargs, pending)
        return self._plain(func, args, kwargs)

    def _conditional_sync(self, kind: str, func: Any, args: tuple, kwargs: dict) -> Any:
        if func is torch.where:
            syncs = len(args) + len(kwargs) == 1
        elif func is torch.nn.functional.one_hot:
            classes = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
            syncs = classes == -1
        else:  # repeat_interleave: a tensor of repeats without output_size
            # ``torch.repeat_interleave(repeats)``, with no input, repeats each index.
            alone = len(args) == 1 and "repeats" not in kwargs
            repeats = args[1] if len(args) > 1 else args[0] if alone else kwargs.get("repeats")
            syncs = isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None
        if syncs:
            return self._sync(kind, func, args, kwargs)
        return self._plain(func, args, kwargs)

    def _index(self, func: Any, args: tuple, kwargs: dict) -> Any:
        x, index = args[0], args[1]
        parts = index if isinstance(index, tuple) else (index,)
        kind = None
        if any(isinstance(p, (range, list)) or is_ndarray(p) for p in parts):
            kind = "python-index"
        elif any(
            isinstance(p, torch.Tensor) and p.dtype in (torch.bool, torch.uint8) for p in parts
        ):
            kind = "boolean-mask-index"
        if kind is None:
            return self._plain(func, args, kwargs)
        on_device = self._device_side(x)
        pending = () if on_device else self._pending([x])
        if not (on_device or pending):
            return self._plain(func, args, kwargs)
        site = user_site()
        if site is None:
            return self._plain(func, args, kwargs)
        start_ns = time.perf_counter_ns()
        out = self._plain(func, args, kwargs)
        self._emit(kind, op_name(func), site, duration_ns=self._measured(start_ns), pending=pending)
        return out

    def _to(self, func: Any, args: tuple, kwargs: dict) -> Any:
        src = args[0]
        if func is T.cpu:
            target, to_host = "cpu", True
        elif func is T.cuda:
            target, to_host = "cuda", False
        else:
            target, to_host = to_device_type(args[1:], kwargs), False
        if target is None:  # a dtype change only
            return self._plain(func, args, kwargs)
        emulating = not self.on_accelerator
        if emulating and target == "cpu" and not to_host:
            # On a CPU run `.to(device)` names the stand-in for the accelerator, unless the line
            # spells out "cpu".
            site = user_site()
            to_host = site is not None and bool(CPU_LITERAL.search(site.source))
        is_batch = self.is_batch_tensor is not None and self.is_batch_tensor(src)
        origin = self._host.get(src)
        start_ns = time.perf_counter_ns()
        out = call_op(func, args, kwargs)
        duration_ns = self._measured(start_ns)
        if emulating:
            leaves_device = to_host
        else:
            leaves_device = target == "cpu" and src.device.type != "cpu"
        if leaves_device:
            on_device = self._device_side(src)
            pending = () if on_device else self._pending([src])
            if on_device or pending:
                site = user_site()
                if site is not None:
                    self._emit(
                        "to-host", op_name(func), site, duration_ns=duration_ns, pending=pending
                    )
            return out
        if (emulating or out.device.type != "cpu") and isinstance(out, torch.Tensor):
            if origin is not None:
                self._report_origin(origin, duration_ns, user_site())
                self._moved_from[out] = origin
            if emulating and (origin is not None or is_batch):
                self._host.pop(out, None)
                self._moved[out] = True
        return out

    def _factory(self, func: Any, args: tuple, kwargs: dict) -> Any:
        from_data = func in DATA_FACTORIES
        data = (args[0] if args else kwargs.get("data")) if from_data else None
        if from_data and isinstance(data, torch.Tensor):
            return self._plain(func, args, kwargs)
        start_ns = time.perf_counter_ns()
        out = call_op(func, args, kwargs)
        duration_ns = self._measured(start_ns)
        if not isinstance(out, torch.Tensor):
            return out
        site = user_site()
        if site is None:
            return out
        if self.on_accelerator:
            on_device = out.device.type != "cpu"
        else:
            on_device = kwargs.get("device") is not None and not CPU_LITERAL.search(site.source)
        if on_device and not from_data:
            return out  # made on the device: nothing was copied
        origin = Origin(
            "tensor-from-python-data" if from_data else "host-tensor-to-device",
            op_name(func),
            site,
            self._step,
            fingerprint(out, data) if from_data else None,
        )
        if on_device:  # built from Python data straight onto the device: a copy now
            self._report_origin(origin, duration_ns, site)
        else:
            self._host[out] = origin
        return out

    def _mark_moved_ignored(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Inside ``ignore()``: still note that a batch was moved (CPU rule)."""
        out = call_op(func, args, kwargs)
        if (
            not self.on_accelerator
            and func is not T.cpu
            and isinstance(out, torch.Tensor)
            and (func is T.cuda or to_device_type(args[1:], kwargs) is not None)
        ):
            self._host.pop(out, None)
            self._moved[out] = True
        return out
