"""Reading a user's DataLoader settings without changing it (cloning: ``loader_sweep``)."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from ..record import LoaderSettings


def loader_settings(loader: DataLoader) -> LoaderSettings:
    """The settings that matter for input speed, read off a live DataLoader."""
    dataset = loader.dataset
    try:
        length: int | None = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        length = None
    sampler = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    inner = getattr(sampler, "sampler", None)
    sampler_name = type(sampler).__name__
    if inner is not None:
        sampler_name += f"({type(inner).__name__})"
    return LoaderSettings(
        dataset=_qualname(type(dataset)),
        dataset_len=length,
        batch_size=loader.batch_size,
        num_workers=loader.num_workers,
        pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers),
        prefetch_factor=loader.prefetch_factor if loader.num_workers > 0 else None,
        drop_last=bool(loader.drop_last),
        sampler=sampler_name,
        collate_fn=_qualname(loader.collate_fn),
        iterable=isinstance(dataset, IterableDataset),
    )


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    if module in ("builtins", "__main__", ""):
        return name
    return f"{module}.{name}"
