"""The memory of this process's children (DataLoader workers), read in one place.

:func:`sample_children` takes one sample; the capture's system sampler calls it for the workers'
RSS beside CPU and GPU figures, and :class:`WorkerMemorySampler` calls it on its own thread for
the loader doctor's copy-on-read pass, which also needs USS. USS (memory unique to a worker) is
what copy-on-read grows; RSS also counts the pages a forked worker still shares with its parent,
and stays flat (see :mod:`._memory`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from ..record import WorkerMemorySeries
from ._clone import clone_loader, preserved_random_state, quiet_iter, shutdown_workers

#: Seconds between samples by default; reading a worker's USS (/proc/PID/smaps) takes a few ms.
DEFAULT_INTERVAL_S = 0.05

_MB = 1024.0 * 1024.0


@dataclass
class ChildrenMemory:
    """One sample of the live children of a process, in MB, one entry per child."""

    rss_mb: list[float] = field(default_factory=list)
    #: Empty unless USS was asked for (it costs a read of /proc/PID/smaps per child).
    uss_mb: list[float] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.rss_mb)


def sample_children(
    process: psutil.Process, *, uss: bool = False, children: list[psutil.Process] | None = None
) -> ChildrenMemory:
    """The memory of each live child of ``process`` (children of children included), or of
    ``children`` when given (finding them reads every process's /proc entry: a caller sampling
    often finds them less often).

    A child that exits while being read, is not ours to read, or has no resident memory yet
    (starting or exiting) is left out.

    Raises:
        psutil.Error: ``process`` itself is gone.
    """
    out = ChildrenMemory()
    for child in process.children(recursive=True) if children is None else children:
        try:
            info = child.memory_full_info() if uss else child.memory_info()
        except (psutil.Error, OSError):
            continue
        if info.rss == 0:
            continue
        out.rss_mb.append(info.rss / _MB)
        if uss:
            out.uss_mb.append(info.uss / _MB)
    return out


class WorkerMemorySampler:
    """A background thread that samples the memory (USS and RSS) of this process's children.

    Use as a context manager around the code that runs the workers::

        with WorkerMemorySampler() as sampler:
            for batch in loader: ...
        series = sampler.series
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.series = WorkerMemorySeries(interval_s=interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()
        self._start = 0.0

    def start(self) -> WorkerMemorySampler:
        self._start = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name="torchdoctor-worker-memory", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> WorkerMemorySeries:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self.series

    def __enter__(self) -> WorkerMemorySampler:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def sample(self) -> None:
        """Take one sample now (none is recorded while no worker is alive)."""
        children = sample_children(self._process, uss=True)
        if not children.count:
            return
        uss, rss = children.uss_mb, children.rss_mb
        s = self.series
        s.timeline_s.append(time.monotonic() - self._start)
        s.workers.append(children.count)
        s.uss_mb_per_worker.append(sum(uss) / len(uss))
        s.rss_mb_per_worker.append(sum(rss) / len(rss))
        s.uss_mb_total.append(sum(uss))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.series.interval_s)


def sample_worker_memory(
    loader: Any,
    *,
    num_workers: int | None = None,
    batches: int | None = None,
    budget_s: float | None = None,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> WorkerMemorySeries:
    """Iterate a clone of ``loader`` with workers and record their memory while they read.

    Args:
        loader: the user's DataLoader (not iterated itself).
        num_workers: workers of the clone; the loader's own setting by default (at least 1).
        batches: batches to draw; a whole epoch by default.
        budget_s: stop drawing after this many seconds.
        interval_s: seconds between samples.

    Returns:
        The memory series; feed ``uss_mb_per_worker`` to
        :func:`~torchdoctor.loader.detect_copy_on_read`.
    """
    workers = max(1, num_workers if num_workers is not None else loader.num_workers)
    clone = clone_loader(loader, num_workers=workers, persistent_workers=False)
    deadline = None if budget_s is None else time.monotonic() + budget_s
    with preserved_random_state(loader), WorkerMemorySampler(interval_s) as sampler:
        it = quiet_iter(clone)
        try:
            for drawn, _ in enumerate(it, start=1):
                if batches is not None and drawn >= batches:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
            sampler.sample()  # the end of the run, before the workers exit
        finally:
            shutdown_workers(it)
            del it
    return sampler.series


__all__ = [
    "ChildrenMemory",
    "WorkerMemorySampler",
    "sample_children",
    "sample_worker_memory",
]
