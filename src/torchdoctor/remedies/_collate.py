"""uint8 batches: collate without casting, then cast and normalise on the device (seed 000 tip 4)."""

from __future__ import annotations

import collections.abc
import ctypes
import mmap
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

#: channel counts that mark a 3-d uint8 array as an HWC image
_IMAGE_CHANNELS = (1, 3, 4)
#: elements Normalize casts and scales at a time on the CPU: one 224x224x3 image, 600 KB as
#: float32, which stays in L2 between the cast and the multiply-add (see Normalize.forward)
_CHUNK_ELEMENTS = 224 * 224 * 3


def uint8_collate(batch: Sequence[Any], *, channels_last: bool = True) -> Any:
    """Stack a list of samples into a batch without changing any dtype.

    Image samples (numpy uint8 arrays of shape (H, W, C) with C in 1, 3, 4, as
    :class:`CachedDataset` returns them) become one uint8 tensor of shape (N, C, H, W). Other
    arrays and tensors are stacked as they are; ints become int64 tensors, floats float64.
    Tuples, lists and dicts are collated field by field, like ``default_collate``.

    Keeping uint8 until the device makes each batch 4x smaller than float32 in worker memory, in
    the worker-to-main transfer and in the host-to-device copy; :class:`Normalize` casts there.
    Inside a DataLoader worker the batch is written straight into shared memory, so it is copied
    once (from the cache pages into the batch), not twice.

    Args:
        batch: samples from a Dataset.
        channels_last: True (the default) keeps the samples' HWC order in memory: the batch has
            shape (N, C, H, W) in ``torch.channels_last`` layout, built with one straight copy
            per sample, which is also the layout convolutions on GPUs prefer. Code that calls
            ``.view`` on the raw input needs ``.contiguous()`` (or ``.reshape``). False gives a
            standard contiguous NCHW tensor through a transposing copy, about 2.6x slower here
            (12.8k vs 4.9k 224x224 images/s in one process, 2-core VM).

    Returns:
        The batch, with the structure of one sample.
    """
    if isinstance(batch, GatheredBatch):
        return batch.collate(channels_last)
    first = batch[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(
            list(batch), 0, out=_shared_empty((len(batch), *first.shape), first.dtype)
        )
    if isinstance(first, np.ndarray):
        return _stack_arrays(batch, channels_last)
    if isinstance(first, (bool, np.bool_)):
        return torch.tensor(batch, dtype=torch.bool)
    if isinstance(first, (int, np.integer)):
        return torch.tensor(np.asarray(batch, dtype=np.int64))
    if isinstance(first, (float, np.floating)):
        return torch.tensor(np.asarray(batch, dtype=np.float64))
    if isinstance(first, collections.abc.Mapping):
        return {
            key: uint8_collate([s[key] for s in batch], channels_last=channels_last)
            for key in first
        }
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # namedtuple
        return type(first)(
            *(uint8_collate(list(f), channels_last=channels_last) for f in zip(*batch, strict=True))
        )
    if isinstance(first, (tuple, list)):
        return [
            uint8_collate(list(f), channels_last=channels_last) for f in zip(*batch, strict=True)
        ]
    return list(batch)


class GatheredBatch(list):
    """A batch a Dataset read in one go (``__getitems__``), as a list of samples.

    It is the plain list of samples ``[ds[i] for i in indices]`` would give, so ``default_collate``
    and any other collate treat it like one; the samples are views into ``columns``, one array
    per field holding the whole batch (in shared memory when read in a DataLoader worker).
    :func:`uint8_collate` recognises it and hands those arrays over as tensors, with no work per
    sample.
    """

    def __init__(self, columns: dict[str, torch.Tensor], kind: str) -> None:
        arrays = [column.numpy() for column in columns.values()]
        count = len(arrays[0]) if arrays else 0
        if kind == "single":
            samples: list[Any] = [arrays[0][k] for k in range(count)]
        elif kind == "dict":
            names = list(columns)
            samples = [{n: a[k] for n, a in zip(names, arrays, strict=True)} for k in range(count)]
        else:
            samples = [tuple(a[k] for a in arrays) for k in range(count)]
        super().__init__(samples)
        self.columns = columns
        self.kind = kind

    def collate(self, channels_last: bool) -> Any:
        """What ``uint8_collate`` returns for these samples, built from the whole-batch columns."""
        tensors = [_column_batch(c, channels_last) for c in self.columns.values()]
        if self.kind == "single":
            return tensors[0]
        if self.kind == "dict":
            return dict(zip(self.columns, tensors, strict=True))
        return tensors


def _column_batch(column: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """One field of a gathered batch, as ``uint8_collate`` makes it from the samples."""
    if column.dim() == 1:  # scalars: collated like Python numbers (int64, float64, bool)
        if column.dtype == torch.bool:
            return column
        wide = torch.float64 if column.dtype.is_floating_point else torch.int64
        return column if column.dtype == wide else column.to(wide)
    is_image = (
        column.dim() == 4 and column.dtype == torch.uint8 and column.shape[3] in _IMAGE_CHANNELS
    )
    if not is_image:
        return column
    if channels_last:
        return column.permute(0, 3, 1, 2)  # HWC memory: a view, no copy
    out = _shared_empty((column.shape[0], column.shape[3], *column.shape[1:3]), column.dtype)
    out.copy_(column.permute(0, 3, 1, 2))
    return out


def _stack_arrays(arrays: Sequence[np.ndarray], channels_last: bool) -> torch.Tensor:
    first = arrays[0]
    dtype = torch.from_numpy(first[:0] if first.ndim else first.reshape(1)[:0]).dtype
    is_image = first.ndim == 3 and first.dtype == np.uint8 and first.shape[2] in _IMAGE_CHANNELS
    if not is_image:
        out = _shared_empty((len(arrays), *first.shape), dtype)
        np.stack(arrays, axis=0, out=out.numpy())
        return out
    height, width, channels = first.shape
    if channels_last:
        out = _shared_empty((len(arrays), height, width, channels), dtype)
        np.stack(arrays, axis=0, out=out.numpy())  # one straight copy per sample
        return out.permute(0, 3, 1, 2)
    out = _shared_empty((len(arrays), channels, height, width), dtype)
    out_np = out.numpy()
    for k, array in enumerate(arrays):
        out_np[k] = array.transpose(2, 0, 1)
    return out


def _shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor, in shared memory when built in a DataLoader worker (as default_collate)."""
    if torch.utils.data.get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    numel = 1
    for n in shape:
        numel *= n
    itemsize = torch.empty((), dtype=dtype).element_size()
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:  # pragma: no cover - private API; fall back to a copy into shm
        return torch.empty(shape, dtype=dtype).share_memory_()
    storage = new_shared(numel * itemsize)
    _populate(storage.data_ptr(), numel * itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


#: madvise(MADV_POPULATE_WRITE), Linux 5.14+: fault in a whole range in one call
_MADV_POPULATE_WRITE = 23
_madvise: Any = None


def _populate(address: int, nbytes: int) -> None:
    """Fault in a fresh shared-memory range at once instead of page by page as it is written.

    A new segment's pages fault one at a time on first write; one madvise call maps them all:
    4.8 vs 5.9 ms to allocate and fill a 4.8 MB batch (32x224x224x3) on this VM. Best effort:
    on other systems (or old kernels) the pages fault as before.
    """
    global _madvise
    if nbytes < 1 << 20 or not sys.platform.startswith("linux"):
        return
    if _madvise is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _madvise = libc.madvise
        except (OSError, AttributeError):  # pragma: no cover - no libc madvise
            _madvise = False
    if _madvise:
        start = address - address % mmap.PAGESIZE
        _madvise(start, address + nbytes - start, _MADV_POPULATE_WRITE)  # failure: no harm


class Normalize(nn.Module):
    """Cast a uint8 image batch to float and normalise it, on whatever device it lives on.

    Put it first in the model (or call it right after the batch reaches the device) so the data
    loader ships uint8 and the cast runs on the accelerator. It works on the batch's device and
    never moves the batch. Computes
    ``(x / max_pixel_value - mean) / std`` per channel as one multiply and one add.

    Mean and std are in the 0-1 scale, as torchvision writes them (ImageNet:
    ``mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)``) and the input's 0-255 values are
    divided by ``max_pixel_value=255``. For mean and std in the 0-255 scale
    (``mean=(123.7, 116.3, 103.5)``) pass ``max_pixel_value=1``.

    Input: a uint8 (or float) batch of shape (N, C, H, W), or (N, H, W, C), which is recognised
    when dimension 1 does not have C entries and the last one does. Output: shape (N, C, H, W),
    dtype ``dtype``, in the input's memory layout (a channels-last or NHWC input gives a
    channels-last tensor, as :func:`uint8_collate` batches are by default).

    Args:
        mean: per-channel means (one value for grey images).
        std: per-channel standard deviations.
        max_pixel_value: the input value that means "full intensity" in the mean/std scale.
        dtype: the output dtype (float32; bfloat16 or float16 halve the output memory).
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        max_pixel_value: float = 255.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        mean_t = torch.as_tensor(mean, dtype=torch.float64).reshape(-1)
        std_t = torch.as_tensor(std, dtype=torch.float64).reshape(-1)
        if mean_t.numel() != std_t.numel():
            raise ValueError(f"mean has {mean_t.numel()} values but std has {std_t.numel()}")
        if (std_t <= 0).any():
            raise ValueError("std must be positive")
        channels = mean_t.numel()
        self.channels = channels
        self.dtype = dtype
        # (x / max - mean) / std == x * scale + shift, folded in float64 then stored once.
        scale = 1.0 / (max_pixel_value * std_t)
        shift = -mean_t / std_t
        self.register_buffer("scale", scale.to(dtype).reshape(1, channels, 1, 1), persistent=False)
        self.register_buffer("shift", shift.to(dtype).reshape(1, channels, 1, 1), persistent=False)
        self._rows: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4:
            raise ValueError(f"Normalize expects a 4-d batch, got shape {tuple(images.shape)}")
        c = self.channels
        if images.shape[1] != c and images.shape[3] == c:
            images = images.permute(0, 3, 1, 2)  # NHWC -> NCHW view, no copy
        elif images.shape[1] != c:
            raise ValueError(
                f"Normalize has {c} channel(s) but the batch has shape {tuple(images.shape)}"
            )
        # The batch stays where it is (the point is to cast on the device it was sent to); only
        # the two small operands follow it if the module was left elsewhere.
        scale, shift = self.scale, self.shift
        if scale.device != images.device:
            scale, shift = scale.to(images.device), shift.to(images.device)
        if images.requires_grad and torch.is_grad_enabled():
            return images.to(dtype=self.dtype, copy=True) * scale + shift
        nhwc = not images.is_contiguous() and images.is_contiguous(
            memory_format=torch.channels_last
        )
        if nhwc:
            # NHWC memory: broadcasting a (1, C, 1, 1) operand would make C (3) the inner loop;
            # per-row operands of length W*C keep the loop long and vectorised (2-4x on CPU).
            n, _, h, w = images.shape
            source = images.permute(0, 2, 3, 1).reshape(n * h, w * c)
            out = torch.empty_like(images, dtype=self.dtype)
            rows = out.permute(0, 2, 3, 1).view(n * h, w * c)
            row_scale, row_shift = self._row_operands(scale, shift, w)
            if images.device.type != "cpu":
                rows.copy_(source)
                torch.addcmul(row_shift, rows, row_scale, out=rows)
                return out
            # On the CPU, cast and scale one cache-sized block of rows at a time, so the float
            # block is still in cache for the multiply-add instead of making a second pass
            # through memory: 5.2-5.4 vs 6.7-7.5 ms per 32x224x224x3 batch, 1 thread, this VM.
            step = max(1, _CHUNK_ELEMENTS // (w * c))
            for start in range(0, n * h, step):
                block = rows[start : start + step]
                block.copy_(source[start : start + step])
                torch.addcmul(row_shift, block, row_scale, out=block)
            return out
        # In place on the fresh copy, one fused multiply-add pass.
        out = images.to(dtype=self.dtype, copy=True)
        return torch.addcmul(shift, out, scale, out=out)

    def _row_operands(
        self, scale: torch.Tensor, shift: torch.Tensor, width: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scale and shift repeated along one NHWC row of ``width`` pixels (cached per width)."""
        key = (width, scale.device, scale.dtype)
        cached = self._rows.get(key)
        if cached is None:
            cached = (scale.reshape(-1).repeat(width), shift.reshape(-1).repeat(width))
            self._rows = {key: cached}
        return cached

    def extra_repr(self) -> str:
        return f"channels={self.channels}, dtype={self.dtype}"
