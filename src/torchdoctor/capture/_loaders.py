"""Reading, cloning and shutting down a user's DataLoader without changing it."""

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


def clone_loader(loader: DataLoader, **overrides: Any) -> DataLoader:
    """A new DataLoader with ``loader``'s dataset, sampling, collate and workers, plus overrides.

    The clone shares the dataset and sampler objects (nothing is copied), so iterating it draws
    the same kind of batches at the same cost.
    """
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    pin_device = getattr(loader, "pin_memory_device", "")
    if pin_device:
        kwargs["pin_memory_device"] = pin_device
    if isinstance(loader.dataset, IterableDataset):
        kwargs["batch_size"] = loader.batch_size
        kwargs["drop_last"] = loader.drop_last
    elif loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler
    else:
        kwargs["batch_size"] = None
        kwargs["sampler"] = loader.sampler
    kwargs.update(overrides)
    if kwargs.get("num_workers", 0) == 0:
        kwargs.pop("prefetch_factor", None)
        kwargs["persistent_workers"] = False
    return DataLoader(loader.dataset, **kwargs)


def shutdown_workers(iterator: Any) -> None:
    """Stop a DataLoader iterator's worker processes now (no-op for single-process ones)."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        try:
            shutdown()
        except Exception:  # noqa: BLE001 - already dead workers are fine
            pass


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    if module in ("builtins", "__main__", ""):
        return name
    return f"{module}.{name}"
