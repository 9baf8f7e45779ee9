"""Time each transform of a Dataset's ``__getitem__``, or profile it, and time the collate.

The Dataset is searched (duck-typed) for Compose-like objects: callables with a ``transforms``
list of callables (torchvision, albumentations, a user's own), in its attributes and one or two
levels down (``Subset.dataset``, torchvision's ``StandardTransform``). Each transform is timed
on real samples in this process, through a shallow copy of the dataset whose Compose holds
timing wrappers: the user's objects are never modified. Without such an object, or when the copy
does not use it, ``__getitem__`` is profiled with cProfile and its direct callees are listed.
Random state the samples consume is restored afterwards.
"""

from __future__ import annotations

import copy
import cProfile
import functools
import inspect
import itertools
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..record import TransformCost
from ._clone import preserved_random_state
from ._costs import profile_costs, transform_costs
from ._measure import Clock

#: Samples timed by default: enough to average random augmentations, few enough for a second.
DEFAULT_SAMPLES = 16

#: Collate calls timed (the median is kept).
COLLATE_REPEATS = 3

#: How deep the attribute search for Compose-like objects goes (dataset.attr.attr).
SEARCH_DEPTH = 3


@dataclass
class Pipeline:
    """A Compose-like object found on a dataset, and every attribute path that reaches it."""

    compose: Any
    paths: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return ".".join(self.paths[0])


def find_transform_pipelines(dataset: Any) -> list[Pipeline]:
    """Compose-like objects reachable from ``dataset``'s attributes, nearest first.

    A Compose-like object is callable and has a non-empty ``transforms`` list or tuple of
    callables. The search follows instance attributes up to :data:`SEARCH_DEPTH` levels and
    does not descend into a Compose-like object.
    """
    found: dict[int, Pipeline] = {}
    seen: set[int] = {id(dataset)}
    frontier: list[tuple[Any, tuple[str, ...]]] = [(dataset, ())]
    for _ in range(SEARCH_DEPTH):
        next_frontier = []
        for obj, path in frontier:
            for name, value in _instance_attrs(obj):
                here = (*path, name)
                if is_compose_like(value):
                    found.setdefault(id(value), Pipeline(value)).paths.append(here)
                    continue
                if id(value) in seen or not _searchable(value):
                    continue
                seen.add(id(value))
                next_frontier.append((value, here))
        frontier = next_frontier
    return list(found.values())


def is_compose_like(obj: Any) -> bool:
    """Callable with a non-empty ``transforms`` list/tuple of callables, or an ``nn.Sequential``
    of modules (transforms that are modules, chained as torchvision's v2 allows)."""
    if not callable(obj) or isinstance(obj, type):
        return False
    if _is_sequential(obj):
        return len(obj) > 0
    try:
        inner = obj.__dict__.get("transforms") if hasattr(obj, "__dict__") else None
    except Exception:
        return False
    return isinstance(inner, (list, tuple)) and len(inner) > 0 and all(callable(t) for t in inner)


def _is_sequential(obj: Any) -> bool:
    from torch.nn import Sequential

    return isinstance(obj, Sequential)


def _members(compose: Any) -> list[Any] | tuple[Any, ...]:
    """The transforms a Compose-like object calls, in order."""
    return list(compose) if _is_sequential(compose) else compose.transforms


def _instrumented(compose: Any, wrapped: list[Any]) -> Any:
    """A shallow copy of ``compose`` that calls ``wrapped`` instead of its transforms."""
    copied = copy.copy(compose)
    if _is_sequential(compose):
        # Sequential.forward iterates ``_modules``; a fresh dict keeps the original's intact.
        copied.__dict__["_modules"] = {str(i): t for i, t in enumerate(wrapped)}
    else:
        inner = compose.transforms
        copied.transforms = tuple(wrapped) if isinstance(inner, tuple) else wrapped
    return copied


def measure_getitem_costs(
    source: Any,
    *,
    samples: int = DEFAULT_SAMPLES,
    clock: Clock = time.perf_counter,
) -> list[TransformCost]:
    """Where the time to make one batch goes, from real samples of a loader or a dataset.

    Args:
        source: a DataLoader (its dataset, ``batch_size`` and ``collate_fn`` are used) or a
            Dataset (``batch_size`` 1, no collate).
        samples: ``__getitem__`` calls timed, spread over the dataset.
        clock: a monotonic clock in seconds.

    Returns:
        The parts of a batch's time with their shares (the record's ``transforms``): one entry
        per transform plus the time outside them, or the top functions of a profile, and
        ``collate_fn``. Empty when the dataset yields no samples.
    """
    is_loader = _is_loader(source)
    dataset = source.dataset if is_loader else source
    collate_fn = source.collate_fn if is_loader else None
    batch_sampler = source.batch_sampler if is_loader else None
    with preserved_random_state(source if is_loader else None):
        batch_size = _batch_size(source) if is_loader else 1
        drawn = _timed_transforms(dataset, samples, clock) or _profiled(dataset, samples, clock)
        if not drawn.samples:
            return []
        collate_ms = None
        if collate_fn is not None and batch_sampler is not None:
            collate_ms = _collate_ms(collate_fn, drawn.samples, batch_size, clock)
    if drawn.transform_ms is not None:
        return transform_costs(drawn.transform_ms, drawn.getitem_ms, batch_size, collate_ms)
    stats, root = drawn.profile or ({}, _key(_get_samples))
    return profile_costs(
        stats,
        root,
        drawn.getitem_ms,
        len(drawn.samples),
        batch_size,
        collate_ms,
        names=transform_names(dataset),
    )


def transform_names(dataset: Any) -> dict[tuple[str, int, str], str]:
    """Profile keys of the callable objects reachable from ``dataset`` -> their class's name:
    a profile names ``ToTensor.__call__`` or a module transform's ``forward`` by its code, and
    the user knows it by its class."""
    names: dict[tuple[str, int, str], str] = {}
    seen: set[int] = {id(dataset)}
    frontier: list[Any] = [dataset]
    for _ in range(SEARCH_DEPTH + 1):
        next_frontier = []
        for obj in frontier:
            for _name, value in _instance_attrs(obj):
                if id(value) in seen or isinstance(value, type):
                    continue
                seen.add(id(value))
                _name_callable(value, names)
                children = _members(value) if is_compose_like(value) else ()
                children = list(children) + list(getattr(value, "_modules", {}).values())
                for child in children:
                    if id(child) not in seen:
                        seen.add(id(child))
                        _name_callable(child, names)
                        next_frontier.append(child)
                if _searchable(value) or _is_sequential(value):
                    next_frontier.append(value)
        frontier = next_frontier
    return names


def _name_callable(obj: Any, names: dict[tuple[str, int, str], str]) -> None:
    kind = type(obj)
    if kind.__module__ == "builtins" or not callable(obj):
        return
    for attr in ("forward", "__call__"):
        # Only a method the class defines itself names it (``nn.Module.__call__`` and a base
        # class's ``forward`` are shared by many classes).
        fn = vars(kind).get(attr)
        if getattr(fn, "__code__", None) is not None:
            names.setdefault(_key(fn), kind.__name__)


@dataclass
class _Drawn:
    """Samples drawn for timing, the mean ``__getitem__`` time, and its breakdown."""

    samples: list[Any]
    getitem_ms: float
    #: ``(name, ms per sample, calls per sample)`` of each transform, when timed one by one.
    transform_ms: list[tuple[str, float, float]] | None = None
    #: ``(pstats stats, root key)`` when profiled.
    profile: tuple[dict[Any, Any], tuple[str, int, str]] | None = None


def _batch_size(loader: Any) -> int:
    """Samples per batch: ``batch_size``, or the first batch of a custom batch sampler."""
    if loader.batch_size is not None:
        return loader.batch_size
    if loader.batch_sampler is None:
        return 1  # no automatic batching: each sample is a batch
    first = next(iter(loader.batch_sampler), None)
    return len(first) if first else 1


def _timed_transforms(dataset: Any, samples: int, clock: Clock) -> _Drawn | None:
    """Time each transform through an instrumented shallow copy; ``None`` if not possible."""
    pipelines = find_transform_pipelines(dataset)
    if not pipelines:
        return None
    timers: list[_Timed] = []
    replacements: list[tuple[Pipeline, Any]] = []
    prefix = len(pipelines) > 1
    try:
        for pipe in pipelines:
            inner = _members(pipe.compose)
            label = pipe.label if prefix else None
            wrapped = [
                _Timed(t, _transform_name(t, i, inner, label), clock) for i, t in enumerate(inner)
            ]
            instrumented = _instrumented(pipe.compose, wrapped)
            timers.extend(wrapped)
            replacements.append((pipe, instrumented))
        copied = _copy_with_replacements(dataset, replacements)
        samples_drawn, getitem_s = _draw(copied, samples, clock)
    except Exception:
        # An object that cannot be copied, or a copy the dataset does not tolerate: profile
        # the original instead.
        return None
    if not samples_drawn or not any(t.calls for t in timers):
        return None  # the copy does not go through the Compose we found
    n = len(samples_drawn)
    return _Drawn(
        samples=samples_drawn,
        getitem_ms=1000.0 * getitem_s / n,
        transform_ms=[(t.name, 1000.0 * t.seconds / n, t.calls / n) for t in timers],
    )


def _profiled(dataset: Any, samples: int, clock: Clock) -> _Drawn:
    """Profile ``__getitem__`` with cProfile; the unprofiled time is measured separately."""
    samples_drawn, getitem_s = _draw(dataset, samples, clock)
    if not samples_drawn:
        return _Drawn([], 0.0)
    indices = _indices(dataset, samples)
    previous = sys.getprofile()
    profiler = cProfile.Profile()
    profile = None
    try:
        if indices is None:
            profiler.runcall(_iterate_samples, dataset, len(samples_drawn))
            profile = (pstats.Stats(profiler).stats, _key(_iterate_samples))  # type: ignore[attr-defined]
        else:
            profiler.runcall(_get_samples, dataset, indices)
            profile = (pstats.Stats(profiler).stats, _key(_get_samples))  # type: ignore[attr-defined]
    except ValueError:
        pass  # another profiler owns the interpreter (Python 3.12+): no breakdown
    finally:
        sys.setprofile(previous)
    return _Drawn(samples_drawn, 1000.0 * getitem_s / len(samples_drawn), profile=profile)


def _draw(dataset: Any, samples: int, clock: Clock) -> tuple[list[Any], float]:
    """Up to ``samples`` samples spread over the dataset, and the seconds spent getting them."""
    out: list[Any] = []
    indices = _indices(dataset, samples)
    spent = 0.0
    if indices is None:
        it = iter(dataset)
        while len(out) < samples:
            start = clock()
            try:
                sample = next(it)
            except StopIteration:
                break
            spent += clock() - start
            out.append(sample)
        return out, spent
    for i in indices:
        start = clock()
        sample = dataset[i]
        spent += clock() - start
        out.append(sample)
    return out, spent


def _indices(dataset: Any, samples: int) -> list[int] | None:
    """Evenly spread indices for a map-style dataset, ``None`` for an iterable one."""
    from torch.utils.data import IterableDataset

    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__getitem__"):
        return None
    try:
        n = len(dataset)
    except TypeError:
        return None
    if n <= 0:
        return []
    k = min(samples, n)
    if k == 1:
        return [0]
    return sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})


def _get_samples(dataset: Any, indices: Sequence[int]) -> None:
    for i in indices:
        dataset[i]


def _iterate_samples(dataset: Any, count: int) -> None:
    for _ in itertools.islice(iter(dataset), count):
        pass


def _collate_ms(
    collate_fn: Callable[[list[Any]], Any], samples: list[Any], batch_size: int, clock: Clock
) -> float:
    batch = list(itertools.islice(itertools.cycle(samples), batch_size))
    times = []
    for _ in range(COLLATE_REPEATS):
        start = clock()
        collate_fn(batch)
        times.append(1000.0 * (clock() - start))
    return statistics.median(times)


class _Timed:
    """A transform that adds its own run time to a counter; other attributes pass through."""

    def __init__(self, inner: Callable[..., Any], name: str, clock: Clock) -> None:
        self.inner = inner
        self.name = name
        self.clock = clock
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = self.clock()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.seconds += self.clock() - start
            self.calls += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)


def _transform_name(t: Any, index: int, siblings: Sequence[Any], label: str | None) -> str:
    name = _callable_name(t)
    if sum(1 for s in siblings if _callable_name(s) == name) > 1:
        name = f"{name} #{index + 1}"
    return f"{label}: {name}" if label else name


def _callable_name(t: Any) -> str:
    if inspect.isfunction(t) or inspect.isbuiltin(t):
        return t.__name__
    if inspect.ismethod(t):
        return t.__func__.__name__
    if isinstance(t, functools.partial):
        return _callable_name(t.func)
    return type(t).__name__


def _copy_with_replacements(root: Any, replacements: list[tuple[Pipeline, Any]]) -> Any:
    """A shallow copy of ``root`` where each pipeline's paths lead to its replacement.

    Every object on a path is shallow-copied once; the originals are not touched.
    """
    copies: dict[int, Any] = {id(root): copy.copy(root)}
    for pipe, replacement in replacements:
        for path in pipe.paths:
            original, clone = root, copies[id(root)]
            for name in path[:-1]:
                child = getattr(original, name)
                if id(child) not in copies:
                    copies[id(child)] = copy.copy(child)
                setattr(clone, name, copies[id(child)])
                original, clone = child, copies[id(child)]
            setattr(clone, path[-1], replacement)
    return copies[id(root)]


def _instance_attrs(obj: Any) -> list[tuple[str, Any]]:
    try:
        attrs = vars(obj)
    except TypeError:
        return []
    return [(k, v) for k, v in list(attrs.items()) if not k.startswith("__")]


def _searchable(value: Any) -> bool:
    """Plain objects worth looking inside (not data, modules, classes or functions)."""
    if isinstance(value, (type, str, bytes, int, float, bool, list, tuple, dict, set)):
        return False
    if (
        type(value).__module__ in ("builtins", "numpy", "torch")
        or callable(value)
        and not hasattr(value, "__dict__")
    ):
        return False
    return hasattr(value, "__dict__") and not _is_tensor_like(value)


def _is_tensor_like(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _is_loader(obj: Any) -> bool:
    from torch.utils.data import DataLoader

    return isinstance(obj, DataLoader)


def _key(fn: Callable[..., Any]) -> tuple[str, int, str]:
    code = fn.__code__
    return (code.co_filename, code.co_firstlineno, code.co_name)


__all__ = ["Pipeline", "find_transform_pipelines", "is_compose_like", "measure_getitem_costs"]
