"""``DevicePrefetcher``: copy batch k+1 to the device on a side stream while batch k computes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from .._batches import map_tensors
from .._devices import current_accelerator


class DevicePrefetcher:
    """Wrap a DataLoader so each batch arrives on ``device``, its copy overlapped with compute.

    On a device with streams (CUDA, XPU, ...) the next batch is copied on one side stream,
    created once with the prefetcher and reused every epoch, from pinned host memory, while the
    caller works on the current batch. Before a batch is handed out the compute stream waits for
    its copy, and every tensor records the compute stream (``record_stream``), so the caching
    allocator does not reuse its memory while compute may still read it. On a device without
    ``record_stream`` (OpenReg and other PrivateUse1 backends) the side stream instead waits for
    the compute stream's work so far before each copy: memory the side stream reuses is then no
    longer read, and the copy of batch k+1 still overlaps the compute of batch k.

    On the CPU batches pass through unchanged, so the same loop code runs everywhere; to a device
    without streams (MPS, ...) they are moved with a plain ``.to(device)``.

    Tensors anywhere in a batch (tuples, lists, dicts, namedtuples) are moved; other values pass
    through. Use ``DataLoader(pin_memory=True)`` so the copy can be asynchronous; unpinned tensors
    are pinned here first, which costs a host copy.

    Args:
        loader: any iterable of batches, usually a DataLoader; ``len()`` is forwarded.
        device: the target device; None means the current accelerator, or the CPU if none.

    Example:
        >>> loader = DevicePrefetcher(DataLoader(ds, batch_size=256, pin_memory=True,
        ...                                      collate_fn=uint8_collate), "cuda")
        >>> for images, labels in loader:  # already on the GPU, still uint8
        ...     loss = criterion(model(normalize(images)), labels)
    """

    def __init__(self, loader: Iterable[Any], device: torch.device | str | None = None) -> None:
        self.loader = loader
        self.device = _resolve_device(device)
        if self.device.type == "cpu":
            self._copier: Any = _PassThrough()
        elif _has_streams(self.device):
            self._copier = _StreamCopier(self.device)
        else:  # a device without streams (mps, meta, ...): plain copies, nothing to overlap
            self._copier = _PlainCopier(self.device)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        return self._copier.iterate(iter(self.loader))

    @property
    def stream(self) -> Any:
        """The side stream copies run on (None when batches pass through)."""
        return self._copier.stream

    def __getattr__(self, name: str) -> Any:
        # Forward loader attributes (dataset, sampler, batch_size) so code keeps working.
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


class _PassThrough:
    """The no-op stand-in used where there is nothing to overlap (CPU)."""

    stream = None

    def iterate(self, batches: Iterator[Any]) -> Iterator[Any]:
        yield from batches


class _PlainCopier:
    """Moves each batch with a plain ``.to(device)`` where there is no stream to overlap on."""

    stream = None

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def iterate(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            yield map_tensors(batch, lambda tensor: tensor.to(self.device))


class _StreamCopier:
    """Copies on one side stream, handing out batch k while batch k+1 is in flight."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = _new_stream(device)
        #: Whether the device's tensors have ``record_stream`` (found on the first batch).
        self._records: bool | None = None

    def iterate(self, batches: Iterator[Any]) -> Iterator[Any]:
        try:
            ahead = self._start_copy(next(batches))
        except StopIteration:
            return
        for batch in batches:
            current = self._ready(ahead)
            ahead = self._start_copy(batch)
            yield current
        yield self._ready(ahead)

    def _start_copy(self, batch: Any) -> Any:
        if self._records is False:  # no record_stream: reuse only memory compute is done with
            self.stream.wait_stream(_current_stream(self.device))
        with _on_stream(self.stream, self.device):
            return map_tensors(batch, self._copy_tensor)

    def _copy_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type == "cpu" and not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(self.device, non_blocking=True)

    def _ready(self, batch: Any) -> Any:
        compute = _current_stream(self.device)
        compute.wait_stream(self.stream)

        def record(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.device.type == self.device.type and self._records is not False:
                try:
                    tensor.record_stream(compute)
                    self._records = True
                except (NotImplementedError, RuntimeError, AttributeError):
                    if self._records:  # it worked on an earlier tensor: a real error
                        raise
                    self._records = False
                    self.stream.wait_stream(compute)  # from now on, before each copy
            return tensor

        return map_tensors(batch, record)


def _resolve_device(device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return current_accelerator() or torch.device("cpu")


def _has_streams(device: torch.device) -> bool:
    """Whether ``device`` is an accelerator present here on which a stream can be made."""
    if device.type in ("cpu", "meta", "mps"):
        return False
    try:
        _new_stream(device)
    except (RuntimeError, TypeError, ValueError, AttributeError, NotImplementedError):
        return False
    return True


def _new_stream(device: torch.device) -> Any:
    # The generic torch.Stream where it is also a context manager (torch >= 2.7); before that,
    # the device type's own class (torch.xpu.Stream, ...), by name.
    if hasattr(torch, "accelerator") and hasattr(getattr(torch, "Stream", None), "__enter__"):
        with contextlib.suppress(RuntimeError, TypeError, ValueError):
            return torch.Stream(device=device)
    return getattr(torch, device.type).Stream(device=device)


def _current_stream(device: torch.device) -> Any:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "current_stream"):
        return accelerator.current_stream(device)
    return getattr(torch, device.type).current_stream(device)


def _on_stream(stream: Any, device: torch.device) -> Any:
    """A context that makes ``stream`` current (torch.Stream is one from torch 2.7 on)."""
    if hasattr(stream, "__enter__"):
        return stream
    return getattr(torch, device.type).stream(stream)
