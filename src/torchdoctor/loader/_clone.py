"""Copies of a user's DataLoader, and what can be read off one without changing it.

:func:`clone_loader` rebuilds a DataLoader from its construction settings (same dataset,
sampler or batch sampler, collate function, batch size, pinning, worker init, generator...) with
some of them overridden; every measurement of the loader doctor iterates such clones. The user's
loader is never iterated or changed; its workers are never started. Random state that iterating
a clone consumes (torch's global generator, the loader's and the sampler's generators, Python's
and numpy's global generators) is restored afterwards (:func:`preserved_random_state`), so the
measurement does not change the user's training.

torch is imported inside the functions, so ``import torchdoctor.loader`` does not import it.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections.abc import Iterator
from typing import Any

from ..record import LoaderSettings
from ._rules import valid_loader_kwargs
from ._samplers import batch_size_of, sampler_chain

#: The attribute that marks a DataLoader :func:`clone_loader` built: a clone shares the
#: script's dataset, and what the capture does to the script's passes over it must not touch
#: the clone's (a clone with 4 workers was iterated without any after a served pass ended).
CLONE_MARK = "_torchdoctor_clone"


def clone_loader(loader: Any, **overrides: Any) -> Any:
    """A new DataLoader built with ``loader``'s construction settings, some overridden.

    Handles map-style and iterable datasets, ``batch_size=None`` (no automatic batching) and a
    custom ``batch_sampler``. The result's arguments go through
    :func:`~torchdoctor.loader.valid_loader_kwargs` (with ``num_workers=0`` the worker-only
    ones are reset: DataLoader rejects them then). A DataLoader subclass is
    rebuilt as its class when it does not override ``__init__``, else as a plain DataLoader.

    Args:
        loader: a ``torch.utils.data.DataLoader``.
        **overrides: DataLoader arguments to change, e.g. ``num_workers=4``.

    Returns:
        A fresh DataLoader; iterating it does not touch ``loader``'s iterator or workers.
    """
    from torch.utils.data import DataLoader, IterableDataset

    kwargs = loader_kwargs(loader)
    if "sampler" in overrides or "batch_size" in overrides or "shuffle" in overrides:
        # Re-batching with new sampling settings replaces the custom batch sampler.
        kwargs.pop("batch_sampler", None)
    if "shuffle" in overrides and "sampler" not in overrides:
        kwargs.pop("sampler", None)  # shuffle chooses the sampler
    kwargs.update(overrides)
    if isinstance(kwargs["dataset"], IterableDataset):
        kwargs.pop("sampler", None)
        kwargs.pop("shuffle", None)
    if kwargs.get("batch_sampler") is not None:
        for name in ("batch_size", "sampler", "shuffle", "drop_last"):
            kwargs.pop(name, None)
    kwargs = valid_loader_kwargs(kwargs)
    cls = type(loader)
    if not (isinstance(loader, DataLoader) and cls.__init__ is DataLoader.__init__):
        cls = DataLoader
    with no_worker_count_warning():
        clone = cls(**kwargs)
    setattr(clone, CLONE_MARK, True)
    return clone


def is_clone(loader: Any) -> bool:
    """Whether ``loader`` is one :func:`clone_loader` built (torchdoctor's, not the script's)."""
    return bool(getattr(loader, CLONE_MARK, False))


def loader_kwargs(loader: Any) -> dict[str, Any]:
    """The DataLoader arguments that would rebuild ``loader``."""
    kwargs: dict[str, Any] = {
        "dataset": loader.dataset,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": loader.persistent_workers,
    }
    for optional in ("pin_memory_device", "in_order"):  # newer DataLoader arguments
        if hasattr(loader, optional):
            kwargs[optional] = getattr(loader, optional)
    if loader.batch_size is None and loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler  # the user's own batch sampler
    else:
        kwargs["batch_size"] = loader.batch_size
        kwargs["drop_last"] = loader.drop_last
        kwargs["sampler"] = loader.sampler
    return kwargs


def shutdown_workers(loader_or_iterator: Any) -> None:
    """Stop the worker processes of a DataLoader iterator (or of a loader's persistent one).

    Safe to call more than once and on single-process iterators. A worker that dies while it
    is being stopped is no error: torch's SIGCHLD handler raises in the joining thread when a
    worker started with spawn aborts on being stopped mid-batch ("killed by signal: Aborted"),
    and the iterator's own cleanup has already run by then.
    """
    it = getattr(loader_or_iterator, "_iterator", loader_or_iterator)
    stop = getattr(it, "_shutdown_workers", None)
    if stop is None:
        return
    try:
        stop()
    except RuntimeError as exc:
        if "DataLoader worker" not in str(exc):
            raise


@contextlib.contextmanager
def preserved_random_state(loader: Any = None) -> Iterator[None]:
    """Restore every random generator that iterating a clone of ``loader`` may advance.

    Torch's global CPU generator, Python's and numpy's global generators, and the generators of
    ``loader``, its sampler and batch sampler and of every sampler they wrap (when ``loader``
    is given).
    """
    import torch

    generators = []
    owners = [] if loader is None else [loader, *(s for _, s in sampler_chain(loader))]
    for owner in owners:
        gen = getattr(owner, "generator", None)
        if isinstance(gen, torch.Generator) and all(gen is not g for g, _ in generators):
            generators.append((gen, gen.get_state()))
    torch_state = torch.get_rng_state()
    python_state = random.getstate()
    numpy_state = _numpy_state()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        if numpy_state is not None:
            import numpy

            numpy.random.set_state(numpy_state)
        for gen, state in generators:
            gen.set_state(state)


def _numpy_state() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy.random.get_state()


def sample_batch(loader: Any) -> Any:
    """The first batch of a single-process clone of ``loader`` (random state restored).

    Returns ``None`` when the loader yields nothing.
    """
    clone = clone_loader(loader, num_workers=0)
    with preserved_random_state(loader):
        return next(iter(clone), None)


@contextlib.contextmanager
def no_worker_count_warning() -> Iterator[None]:
    """Silence DataLoader's warning for more workers than cores: a sweep tries that on purpose."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="This DataLoader will create", category=UserWarning
        )
        yield


def quiet_iter(loader: Any) -> Any:
    """``iter(loader)`` without the warning for more workers than cores."""
    with no_worker_count_warning():
        return iter(loader)


def loader_settings(loader: Any) -> LoaderSettings:
    """The settings that matter for input speed, read off a live DataLoader.

    ``batch_size`` is the real one when a batch sampler carries it (:func:`batch_size_of`),
    with ``batch_size_source`` naming the attribute it was read from.
    """
    from torch.utils.data import IterableDataset

    dataset = loader.dataset
    try:
        length: int | None = len(dataset)
    except TypeError:
        length = None
    sampler = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    inner = getattr(sampler, "sampler", None)
    sampler_name = type(sampler).__name__
    if inner is not None:
        sampler_name += f"({type(inner).__name__})"
    batch_size, batch_size_source = batch_size_of(loader)
    return LoaderSettings(
        dataset=_qualname(type(dataset)),
        dataset_len=length,
        batch_size=batch_size,
        batch_size_source=batch_size_source,
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


__all__ = [
    "clone_loader",
    "loader_kwargs",
    "loader_settings",
    "no_worker_count_warning",
    "preserved_random_state",
    "quiet_iter",
    "sample_batch",
    "shutdown_workers",
]
