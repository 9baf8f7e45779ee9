"""A DataLoader's sampler chain: the batch size a batch sampler carries, and every sampler behind
the loader (their generators are restored after a clone is iterated).

A loader built with ``batch_sampler=`` has ``batch_size=None``: the size sits on the batch
sampler, or on one that it wraps (accelerate's ``BatchSamplerShard`` and ``SkipBatchSampler``,
which the Hugging Face Trainer uses, Lightning's wrappers, a user's own). Only attributes are
read: no sampler is iterated, so reading one consumes no random numbers. torch is not imported.
"""

from __future__ import annotations

from typing import Any

from ..record import BATCH_SIZE_ARGUMENT

#: The attributes a sampler wrapper keeps what it wraps under, followed in this order.
WRAPPED = ("batch_sampler", "sampler")

#: Wrappers nested deeper than this are not followed (a chain is rarely more than 3 deep).
MAX_DEPTH = 6


def sampler_chain(loader: Any) -> list[tuple[str, Any]]:
    """``(path, sampler)`` for the loader's batch sampler, its sampler and what they wrap.

    Depth first, batch sampler before sampler, each object once; the path is the attribute path
    from the loader (``batch_sampler.batch_sampler.sampler``).
    """
    found: list[tuple[str, Any]] = []
    seen = {id(loader)}

    def visit(owner: Any, path: str, depth: int) -> None:
        for name in WRAPPED:
            inner = _attribute(owner, name)
            if inner is None or id(inner) in seen:
                continue
            seen.add(id(inner))
            inner_path = f"{path}.{name}" if path else name
            found.append((inner_path, inner))
            if depth < MAX_DEPTH:
                visit(inner, inner_path, depth + 1)

    visit(loader, "", 1)
    return found


def batch_size_of(loader: Any) -> tuple[int | None, str | None]:
    """Samples per batch as the loader's settings say, and the attribute it was read from.

    The DataLoader's ``batch_size`` when it batches automatically (source ``"batch_size"``);
    else the first ``batch_size`` along its batch sampler's chain (source
    ``"batch_sampler.batch_size"``, ``"batch_sampler.batch_sampler.batch_size"``...). A
    shard that splits each batch between processes (``split_batches`` and ``num_processes``,
    accelerate's ``BatchSamplerShard``) gives each process its share. ``(None, None)`` without
    automatic batching (the dataset yields whole batches) or when no sampler names a size.
    """
    size = _positive_int(_attribute(loader, "batch_size"))
    if size is not None:
        return size, BATCH_SIZE_ARGUMENT
    for path, sampler in sampler_chain(loader):
        if not path.startswith("batch_sampler"):
            continue  # a loader with a batch sampler still has an unused default sampler
        size = _positive_int(_attribute(sampler, "batch_size"))
        if size is None:
            continue
        processes = _positive_int(_attribute(sampler, "num_processes"))
        split = _attribute(sampler, "split_batches") is True
        if split and processes is not None and processes > 1 and size % processes == 0:
            return size // processes, f"{path}.batch_size / {path}.num_processes"
        return size, f"{path}.batch_size"
    return None, None


def _attribute(owner: Any, name: str) -> Any:
    """``owner.name``, or ``None`` when it is missing or its property raises."""
    try:
        return getattr(owner, name, None)
    except Exception:  # noqa: BLE001 - a user's property must not stop the run
        return None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
