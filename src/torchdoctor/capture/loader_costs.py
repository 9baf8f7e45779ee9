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

from ..analysis.transforms import TransformCost, profile_costs, transform_costs
from .loader_sweep import Clock, preserved_random_state

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
    """Callable with a non-empty ``transforms`` list/tuple of callables."""
    if not callable(obj) or isinstance(obj, type):
        return False
    try:
        inner = obj.__dict__.get("transforms") if hasattr(obj, "__dict__") else None
    except Exception:
        return False
    return isinstance(inner, (list, tuple)) and len(inner) > 0 and all(callable(t) for t in inner)


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
    dataset = getattr(source, "dataset", source) if _is_loader(source) else source
    batch_size = (getattr(source, "batch_size", None) or 1) if _is_loader(source) else 1
    collate_fn = getattr(source, "collate_fn", None) if _is_loader(source) else None
    auto_batching = _is_loader(source) and getattr(source, "batch_sampler", None) is not None
    with preserved_random_state(source if _is_loader(source) else None):
        costs, batch = _timed_transforms(dataset, samples, clock)
        if costs is None:
            costs, batch = _profiled(dataset, samples, clock)
        if not batch:
            return []
        collate_ms = None
        if collate_fn is not None and auto_batching:
            collate_ms = _collate_ms(collate_fn, batch, batch_size, clock)
    getitem_ms, timings = costs
    if isinstance(timings, list):
        return transform_costs(timings, getitem_ms, batch_size, collate_ms)
    stats, root = timings
    return profile_costs(stats, root, getitem_ms, len(batch), batch_size, collate_ms)


def _timed_transforms(dataset: Any, samples: int, clock: Clock) -> tuple[Any, list[Any]]:
    """Time each transform through an instrumented shallow copy; ``(None, [])`` if not possible."""
    pipelines = find_transform_pipelines(dataset)
    if not pipelines:
        return None, []
    timers: list[_Timed] = []
    replacements: list[tuple[Pipeline, Any]] = []
    prefix = len(pipelines) > 1
    for pipe in pipelines:
        try:
            instrumented = copy.copy(pipe.compose)
            wrapped = [
                _Timed(
                    t,
                    _transform_name(t, i, pipe.compose.transforms, pipe.label if prefix else None),
                    clock,
                )
                for i, t in enumerate(pipe.compose.transforms)
            ]
            instrumented.transforms = (
                type(pipe.compose.transforms)(wrapped)
                if isinstance(pipe.compose.transforms, tuple)
                else wrapped
            )
        except Exception:
            return None, []
        timers.extend(wrapped)
        replacements.append((pipe, instrumented))
    try:
        copied = _copy_with_replacements(dataset, replacements)
    except Exception:
        return None, []
    try:
        batch, getitem_s = _draw(copied, samples, clock)
    except Exception:
        # An instrumented copy the dataset does not tolerate: profile the original instead.
        return None, []
    if not batch or not any(t.calls for t in timers):
        return None, []  # the copy does not go through the Compose we found
    n = len(batch)
    timings = [(t.name, 1000.0 * t.seconds / n, t.calls / n) for t in timers]
    return (1000.0 * getitem_s / n, timings), batch


def _profiled(dataset: Any, samples: int, clock: Clock) -> tuple[Any, list[Any]]:
    """Profile ``__getitem__`` with cProfile; the unprofiled time is measured separately."""
    batch, getitem_s = _draw(dataset, samples, clock)
    if not batch:
        return (0.0, ([], None)), []
    indices = _indices(dataset, samples)
    previous = sys.getprofile()
    profiler = cProfile.Profile()
    try:
        if indices is None:
            profiler.runcall(_iterate_samples, dataset, len(batch))
            root = _key(_iterate_samples)
        else:
            profiler.runcall(_get_samples, dataset, indices)
            root = _key(_get_samples)
    except ValueError:
        # Another profiler owns the interpreter (Python 3.12+): report the total only.
        stats: dict[Any, Any] = {}
        root = _key(_get_samples)
    else:
        stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    finally:
        sys.setprofile(previous)
    return (1000.0 * getitem_s / len(batch), (stats, root)), batch


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
