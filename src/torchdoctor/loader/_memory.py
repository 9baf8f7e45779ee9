"""Memory of the input pipeline: bytes per batch, batches in flight, dtypes, copy-on-read.

The arithmetic is seed 000's tip 4: every worker keeps ``prefetch_factor`` batches in flight,
so the loader holds ``bytes_per_batch * prefetch_factor * num_workers`` of batches in RAM
(``bytes_per_batch`` without workers). A 32 x 3 x 512 x 512 float32 image batch is 100,663,296
bytes and its int64 masks 67,108,864: 167 MB per batch, 1.3 GB for 8 workers with one batch each.
Kept as uint8 (normalised on the device) the same batch is 33,554,432 bytes, 5x less.

Copy-on-read: DataLoader workers are forked and share the parent's memory until a page is
written. Reading a Python object writes its reference count, so a Dataset that holds its samples
as Python lists or dicts is copied page by page into every worker as the epoch reads it. The
worker's RSS does not show it (a forked child's RSS already counts the shared pages); its USS
(unique set size) does, and climbs through the run. numpy arrays, Arrow tables and tensors have
one object per array, not per value, so reading them writes nothing.

Pure: nothing here imports torch. :func:`describe_batch` is duck-typed over anything with
``shape``, ``dtype`` and ``nbytes`` / ``element_size()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .._batches import path_text, walk
from ..record import BatchLeaf, CopyOnRead, Finding, LoaderMemory
from ._rules import DEFAULT_PREFETCH_FACTOR

#: A leaf smaller than this share of the batch gets no dtype advice (class-label vectors).
MIN_ADVICE_SHARE = 0.05

#: ... nor one smaller than this many bytes per batch: saving a few kB is not worth a change.
MIN_ADVICE_BYTES = 1_000_000

#: Worker USS must grow by at least this much per worker over the run to be copy-on-read.
#: In tests/unit/loader/test_memory.py (4M values, 2 workers, one epoch) the numpy-backed
#: dataset's workers grew by 0.2 MB each, the same values as lists of Python floats by 46-49 MB.
COPY_ON_READ_MIN_GROWTH_MB = 24.0

#: ... and the growth must be steady: the correlation of USS with time at least this.
COPY_ON_READ_MIN_CORRELATION = 0.8

#: Fewest samples of the series to judge a trend from.
COPY_ON_READ_MIN_SAMPLES = 5

_INT_BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "int64": 64}


def describe_batch(batch: Any, path: str = "batch") -> list[BatchLeaf]:
    """Every array in ``batch`` (tensors, numpy arrays, in tuples, lists, dicts, dataclasses and
    attribute holders), found by the package's one batch walker, named by its path.

    Value statistics (min, max, mean) are computed for arrays of numbers; strings and other
    leaves are skipped.
    """
    return [_leaf(array, path_text(path, where)) for where, array in walk(batch, _is_array)]


def loader_memory(
    leaves: Sequence[BatchLeaf], num_workers: int, prefetch_factor: int | None
) -> LoaderMemory:
    """Batches in flight and their bytes for a loader whose batches look like ``leaves``."""
    per_batch = sum(leaf.nbytes for leaf in leaves)
    factor = (prefetch_factor or DEFAULT_PREFETCH_FACTOR) if num_workers > 0 else 1
    in_flight = factor * num_workers if num_workers > 0 else 1
    advised = per_batch - sum(leaf.nbytes - _advised_nbytes(leaf) for leaf in leaves)
    return LoaderMemory(
        bytes_per_batch=per_batch,
        num_workers=num_workers,
        prefetch_factor=factor,
        batches_in_flight=in_flight,
        bytes_in_flight=per_batch * in_flight,
        bytes_per_batch_advised=advised,
        leaves=list(leaves),
    )


def dtype_advice(leaves: Sequence[BatchLeaf], *, accelerator: bool = True) -> list[Finding]:
    """Smaller dtypes for the arrays that dominate a batch, with the code.

    - float32 image batches (4-D) whose values look normalised on the CPU: keep uint8 in the
      Dataset and normalise on the device.
    - integer mask batches (int16/32/64, 3+ dims with the batch) with values in 0..255: uint8.
    - float64 arrays: float32.
    """
    total = sum(leaf.nbytes for leaf in leaves) or 1
    findings = []
    where = "on the device" if accelerator else "in the model's forward"
    for leaf in leaves:
        kind = _advice_kind(leaf)
        advised = _advised_nbytes(leaf)
        small = leaf.nbytes < max(MIN_ADVICE_SHARE * total, MIN_ADVICE_BYTES)
        if kind is None or small or advised >= leaf.nbytes:
            continue
        title, fix = _dtype_text(leaf, kind, where)
        findings.append(
            Finding(
                kind="loader.dtype",
                title=f"{title}: {_mb(leaf.nbytes)} per batch, {_mb(advised)} {_AS[kind]}",
                fix=fix,
                severity="info",
                detail={
                    "path": leaf.path,
                    "dtype": leaf.dtype,
                    "shape": leaf.shape,
                    "saved_bytes": leaf.nbytes - advised,
                },
            )
        )
    return findings


_AS = {"image": "as uint8", "mask": "as uint8", "float64": "as float32"}


def _dtype_text(leaf: BatchLeaf, kind: str, where: str) -> tuple[str, str]:
    """Title and fix of one dtype finding."""
    if kind == "image":
        return (
            f"{leaf.path} is float32 normalised on the CPU",
            "# in the Dataset: return the uint8 image, no ToTensor()/Normalize()\n"
            "image = torch.from_numpy(array).permute(2, 0, 1).contiguous()  # uint8\n"
            f"# {where}, first thing in the step:\n"
            "x = x.to(device, non_blocking=True).float().div_(255)\n"
            "x = (x - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)",
        )
    if kind == "mask":
        return (
            f"{leaf.path} is {leaf.dtype} with values in 0..255",
            "# in the Dataset:\n"
            "mask = torch.from_numpy(mask.astype(numpy.uint8))\n"
            "# in the loss:\n"
            "loss = criterion(output, target.long())",
        )
    return (
        f"{leaf.path} is float64",
        "# in the Dataset (numpy defaults to float64):\narray = array.astype(numpy.float32)",
    )


def detect_copy_on_read(worker_mb: Sequence[float]) -> CopyOnRead:
    """Whether per-worker memory (USS, MB, one value per sample time) climbs through the run.

    Flagged when it grows by :data:`COPY_ON_READ_MIN_GROWTH_MB` or more from the first quarter
    of the run to the last (medians, so a spike does not count) and the growth is steady: the
    correlation of memory with sample order is :data:`COPY_ON_READ_MIN_CORRELATION` or more.
    """
    values = [float(v) for v in worker_mb if v is not None and math.isfinite(v)]
    n = len(values)
    if n < COPY_ON_READ_MIN_SAMPLES:
        return CopyOnRead(
            False, 0.0, values[0] if values else 0.0, values[-1] if values else 0.0, None, n
        )
    quarter = max(1, n // 4)
    start = _median(values[:quarter])
    end = _median(values[-quarter:])
    growth = end - start
    corr = _correlation(list(range(n)), values)
    flagged = (
        growth >= COPY_ON_READ_MIN_GROWTH_MB
        and corr is not None
        and corr >= COPY_ON_READ_MIN_CORRELATION
    )
    return CopyOnRead(flagged, growth, start, end, corr, n)


def copy_on_read_finding(result: CopyOnRead, dataset: str, num_workers: int) -> Finding | None:
    """The finding for a flagged :class:`CopyOnRead`, with the fix; ``None`` when not flagged."""
    if not result.flagged:
        return None
    return Finding(
        kind="loader.copy_on_read",
        title=(
            f"each worker's memory grew by {result.growth_mb:.0f} MB during the run: "
            f"{dataset} holds its samples as Python objects, copied into every worker as read"
        ),
        fix=(
            "# keep samples in one array, not a list of Python objects:\n"
            "self.samples = numpy.stack(samples)            # or a pyarrow.Table\n"
            "self.paths = numpy.array(paths, dtype=numpy.bytes_)  # strings as bytes, not str\n"
            "# or cache them in shared memory:\n"
            "from torchdoctor import CachedDataset\n"
            "dataset = CachedDataset(dataset)"
        ),
        severity="warning",
        detail={
            "growth_mb_per_worker": result.growth_mb,
            "start_mb": result.start_mb,
            "end_mb": result.end_mb,
            "correlation": result.correlation,
            "num_workers": num_workers,
            "projected_mb": result.growth_mb * num_workers,
        },
    )


def _advice_kind(leaf: BatchLeaf) -> str | None:
    if leaf.dtype == "float32" and len(leaf.shape) == 4 and _looks_normalised(leaf):
        return "image"
    bits = _INT_BITS.get(leaf.dtype)
    if (
        bits is not None
        and bits > 8
        and len(leaf.shape) >= 3
        and leaf.min is not None
        and leaf.max is not None
        and leaf.min >= 0
        and leaf.max <= 255
    ):
        return "mask"
    if leaf.dtype == "float64":
        return "float64"
    return None


def _advised_nbytes(leaf: BatchLeaf) -> int:
    kind = _advice_kind(leaf)
    if kind == "image":
        return leaf.nbytes // 4
    if kind == "mask":
        return leaf.nbytes // (_INT_BITS[leaf.dtype] // 8)
    if kind == "float64":
        return leaf.nbytes // 2
    return leaf.nbytes


def _looks_normalised(leaf: BatchLeaf) -> bool:
    """Values of a 0..1 scaled or mean/std normalised image (not raw 0..255 floats)."""
    if leaf.min is None or leaf.max is None:
        return False
    return -10.0 <= leaf.min and leaf.max <= 10.0


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type)


def _leaf(array: Any, path: str) -> BatchLeaf:
    dtype = str(array.dtype).removeprefix("torch.")
    shape = [int(s) for s in array.shape]
    nbytes = getattr(array, "nbytes", None)
    if nbytes is None:
        nbytes = array.element_size() * array.numel()
    leaf = BatchLeaf(path=path, dtype=dtype, shape=shape, nbytes=int(nbytes))
    if dtype in _INT_BITS or dtype.startswith(("float", "bfloat")):
        size = math.prod(shape)
        if size:
            leaf.min = float(array.min())
            leaf.max = float(array.max())
            if dtype.startswith(("float", "bfloat")):
                leaf.mean = float(array.mean())
    return leaf


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return sxy / math.sqrt(sxx * syy)


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.0f} MB"


__all__ = [
    "COPY_ON_READ_MIN_CORRELATION",
    "COPY_ON_READ_MIN_GROWTH_MB",
    "COPY_ON_READ_MIN_SAMPLES",
    "MIN_ADVICE_BYTES",
    "MIN_ADVICE_SHARE",
    "copy_on_read_finding",
    "describe_batch",
    "detect_copy_on_read",
    "dtype_advice",
    "loader_memory",
]
