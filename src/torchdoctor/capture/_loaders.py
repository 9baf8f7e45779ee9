"""The script's DataLoaders as the capture sees them: their settings, which one feeds the steps,
and the batches kept to replay. (Cloning a loader is the loader package's work.)"""

from __future__ import annotations

import dataclasses
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader

from .._batches import batch_nbytes, leading_dim
from ..loader import is_clone, loader_settings, shutdown_workers
from ..record import BATCH_SIZE_MEASURED, LoaderSettings

#: Batches kept in memory for the model-alone replay, at most this many bytes (and ``steps``).
REPLAY_MAX_BYTES = 512 * 2**20

#: Batches per dataset whose leading dimension is read (the batch size when no setting names
#: it); enough to see past a short last batch, and few so later steps pay nothing.
SIZED_BATCHES = 16


class LoaderTracker:
    """The DataLoaders the script builds and iterates, and which one feeds its training steps.

    Loaders are keyed by their dataset: a script that rebuilds its loader every epoch (same
    dataset) keeps one entry, its newest loader. That loader is held strongly until the run
    ends: one built in the ``for`` statement (``for x, y in DataLoader(ds, ...)``) is referenced
    by nothing else once its iterator exists, and the trials, the worker sweep and the
    loader-alone phase need it.
    """

    def __init__(self, seen: dict[str, int]) -> None:
        self._seen = seen
        self._loaders: dict[int, DataLoader] = {}  # id(dataset) -> newest loader over it
        self._settings: dict[int, LoaderSettings] = {}
        self._created_at: dict[int, str] = {}  # id(DataLoader) -> "file:line"
        self._iterators: weakref.WeakSet = weakref.WeakSet()
        self._batches_by_dataset: dict[int, int] = {}
        self._leading_dims: dict[int, list[int | None]] = {}  # id(dataset) -> per batch

    def created(self, loader: DataLoader, site: str) -> None:
        self._created_at[id(loader)] = site

    def iterated(self, loader: DataLoader, it: Any) -> None:
        key = id(loader.dataset)
        if self._loaders.get(key) is not loader:
            self._seen["dataloaders"] += 1
        self._loaders[key] = loader
        settings = loader_settings(loader)
        settings.created_at = self._created_at.get(id(loader))
        self._settings[key] = settings
        if it not in self._iterators:
            self._iterators.add(it)
            self._seen["dataloader_iterators"] += 1

    def sized(self, dataset_key: int, batch: Any) -> None:
        """Read the leading dimension of one of the first :data:`SIZED_BATCHES` batches."""
        dims = self._leading_dims.setdefault(dataset_key, [])
        if len(dims) < SIZED_BATCHES:
            dims.append(leading_dim(batch))

    def count_measured_batch(self, dataset_key: int) -> None:
        self._batches_by_dataset[dataset_key] = self._batches_by_dataset.get(dataset_key, 0) + 1

    def main_dataset_key(self) -> int | None:
        """The dataset that supplied most batches during the measured steps."""
        if not self._batches_by_dataset:
            return None
        return max(self._batches_by_dataset, key=self._batches_by_dataset.__getitem__)

    def main_settings(self) -> LoaderSettings | None:
        """The main loader's settings; a batch size no setting names is the batches' own."""
        key = self.main_dataset_key()
        if key is None and self._settings:
            key = next(iter(self._settings))
        settings = self._settings.get(key) if key is not None else None
        if settings is None or settings.batch_size is not None:
            return settings
        dims = Counter(d for d in self._leading_dims.get(key, ()) if d is not None)
        if not dims:
            return settings
        size = dims.most_common(1)[0][0]  # the usual batch, not a short last one
        return dataclasses.replace(settings, batch_size=size, batch_size_source=BATCH_SIZE_MEASURED)

    def main_loader(self) -> DataLoader | None:
        key = self.main_dataset_key()
        return self._loaders.get(key) if key is not None else None

    def shutdown_workers(self) -> None:
        """Stop the worker processes of every DataLoader iterator the script created."""
        for it in list(self._iterators):
            shutdown_workers(it)
        for loader in list(self._loaders.values()):
            if getattr(loader, "_iterator", None) is not None:
                shutdown_workers(loader._iterator)
                # A persistent loader would ``_reset`` its stopped iterator at the script's next
                # pass (its queues are closed): the next pass starts a fresh one.
                loader._iterator = None

    def release(self) -> None:
        """Let go of the script's loaders (the run is over)."""
        self._loaders.clear()


class ReplayStore:
    """Batches kept for the model-alone phase, which replays them instead of loading new ones.

    Batches are kept from the untimed steps before measuring (warmup, sync finder, trace): a kept
    batch's memory cannot be reused for the next one, and paying for fresh memory inside a
    measured step would slow it. Only a dataset first seen while measuring has its batches kept
    then (one is enough to replay).
    """

    def __init__(self, max_batches: int, max_bytes: int = REPLAY_MAX_BYTES) -> None:
        self._max_batches = max_batches
        self._max_bytes = max_bytes
        self._by_dataset: dict[int, list[Any]] = {}
        self._bytes = 0
        self._replay: list[Any] = []
        self._pos = 0

    def keep(self, dataset_key: int, batch: Any, measuring: bool) -> None:
        if measuring and dataset_key in self._by_dataset:
            return
        kept = self._by_dataset.setdefault(dataset_key, [])
        if len(kept) >= self._max_batches:
            return
        size = batch_nbytes(batch)
        if self._bytes + size > self._max_bytes and kept:
            return
        kept.append(batch)
        self._bytes += size

    def start(self, dataset_key: int) -> bool:
        """Replay the batches kept for ``dataset_key``; False when there are none."""
        self._replay = self._by_dataset.get(dataset_key, [])
        self._pos = 0
        return bool(self._replay)

    def next(self) -> Any | None:
        if not self._replay:
            return None
        batch = self._replay[self._pos % len(self._replay)]
        self._pos += 1
        return batch

    def clear(self) -> None:
        self._replay = []
        self._by_dataset.clear()


class ServedPasses:
    """The script's passes over a DataLoader while a phase hands it batches in the loader's
    place (the model-alone replay, the worker sweep's and the trials' clones).

    A served batch never reaches the loader's sampler, so the script's pass would never end: a
    script whose epoch arithmetic trusts ``len(loader)`` (timm's gradient accumulation, whose
    last group is ``len(loader) % accum`` long) then divides by zero. Each served batch counts
    as one the iterator yielded, and the pass ends where the loader's own would, after
    ``len(loader)`` batches, served and loaded together; the phase's steps go on in the
    script's next pass. A loader without a length is not bounded.
    """

    def __init__(self) -> None:
        self._served: weakref.WeakSet = weakref.WeakSet()
        #: Datasets (by id) whose pass a phase ended: their next pass is built without workers.
        self._ended: set[int] = set()
        #: Datasets (by id) whose current pass was built that way.
        self.without_workers: set[int] = set()

    def serving(self, it: Any) -> None:
        """A phase serves ``it``'s next batch: count it, or end the pass (``StopIteration``)."""
        if _pass_over(it):
            self._ended.add(id(getattr(it, "_dataset", it)))
            raise StopIteration
        if hasattr(it, "_num_yielded"):
            it._num_yielded += 1
            self._served.add(it)

    def loading(self, it: Any) -> None:
        """``it`` loads its next batch itself: end the pass early by the batches served in it."""
        if it in self._served and _pass_over(it):
            raise StopIteration

    def new_pass(self, loader: DataLoader, make: Callable[[DataLoader], Any]) -> Any:
        """The script's iterator for its next pass over ``loader`` (``make`` builds it). After a
        pass a phase ended, the phase serves this one too: it is built without workers, which
        would only start, prefetch and take cores from the worker sweep's clones (and a
        persistent loader's workers may have been stopped for them)."""
        workers = getattr(loader, "num_workers", 0)
        if is_clone(loader):  # torchdoctor's own clone of the loader: its workers as asked
            return make(loader)
        if not workers or id(loader.dataset) not in self._ended:
            self.without_workers.discard(id(loader.dataset))
            return make(loader)
        self._ended.discard(id(loader.dataset))
        self.without_workers.add(id(loader.dataset))
        loader.num_workers = 0
        try:
            return make(loader)
        finally:
            loader.num_workers = workers


def _pass_over(it: Any) -> bool:
    """Whether ``it`` has yielded the batches of a whole pass (never, without a length: an
    ``IterableDataset``'s iterator has none, its loader's ``len`` is only an estimate; nor
    when the script's sampler refuses one: an endless sampler's ``__len__`` may raise anything,
    e.g. ``NotImplementedError``, and the script never asked for it)."""
    try:
        return int(getattr(it, "_num_yielded", 0)) >= len(it)
    except Exception:
        return False
