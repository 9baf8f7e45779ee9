"""Building a cache's shards: planning the sample ranges, finding the shards a resumed build
already has, and writing each shard (in worker processes for large sources)."""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._format import BUILD_DIR, field_file, marker_file
from ._sources import ImageOptions, Source, remember_source, reopen
from ._storage import CacheError, Store


@dataclass(frozen=True)
class ShardJob:
    dest: str
    storage_options: dict[str, Any]
    source: dict[str, Any]
    options: ImageOptions
    shard: int
    start: int
    stop: int
    build_key: str


def plan_shards(src: Source, shard_mb: float) -> list[tuple[int, int]]:
    """Sample ranges of the shards; depends only on the source, so a resumed build agrees."""
    count = len(src)
    first = src.fields(0)
    sample_bytes = max(1, max(a.nbytes for a in first.values()))
    per_shard = max(1, int(shard_mb * 2**20) // sample_bytes)
    # At least 16 shards when the source allows it, so workers share the work and the progress
    # bar moves; but no shard below 64 samples, where per-file costs would show.
    per_shard = min(per_shard, max(64, math.ceil(count / 16)))
    return [(start, min(start + per_shard, count)) for start in range(0, count, per_shard)]


def finished_shards(
    store: Store, plan: list[tuple[int, int]], build_key: str
) -> dict[int, dict[str, Any]]:
    done: dict[int, dict[str, Any]] = {}
    present = set(store.list(BUILD_DIR))
    for shard, (start, stop) in enumerate(plan):
        name = marker_file(shard)
        if name not in present:
            continue
        try:
            marker = store.read_json(name)
        except (ValueError, OSError):
            continue
        if (marker.get("build_key"), marker.get("start"), marker.get("stop")) != (
            build_key,
            start,
            stop,
        ):
            continue
        if all(store.size(f["file"]) == f["bytes"] for f in marker["fields"].values()):
            done[shard] = marker
    return done


def run_jobs(
    src: Source,
    todo: list[ShardJob],
    workers: int,
    progress: bool,
    total: int,
    already: dict[int, dict[str, Any]],
) -> dict[int, dict[str, Any]]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    markers: dict[int, dict[str, Any]] = {}
    done_samples = sum(m["stop"] - m["start"] for m in already.values())
    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    console = Console(stderr=True)
    if workers <= 0:
        with Progress(*columns, console=console, disable=not progress) as bar:
            task = bar.add_task("building cache", total=total, completed=done_samples)
            for job in todo:
                marker = build_shard(job, source=src, on_sample=lambda: bar.advance(task))
                markers[job.shard] = marker
        return markers
    # fork on Linux: no re-import of the caller's __main__, so a script without a main guard
    # works, the workers inherit the opened source (even a dataset from a local function), and
    # the pool forks when created, before the progress bar starts its thread.
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    if method == "fork":
        remember_source(src)
    pool = multiprocessing.get_context(method).Pool(workers, initializer=_ignore_sigint)
    try:
        with Progress(*columns, console=console, disable=not progress) as bar:
            task = bar.add_task("building cache", total=total, completed=done_samples)
            for marker in pool.imap_unordered(build_shard, todo):
                markers[marker["shard"]] = marker
                bar.advance(task, marker["stop"] - marker["start"])
    except BaseException:
        # Ctrl-C or a failed shard: stop the other shards now rather than finishing them; their
        # temp files are swept when the build completes, finished shards are kept for resuming.
        pool.terminate()
        pool.join()
        raise
    pool.close()
    pool.join()
    return markers


def _ignore_sigint() -> None:
    """Build workers leave Ctrl-C to the parent, which stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def build_shard(
    job: ShardJob, source: Source | None = None, on_sample: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Write one shard's field files, then its marker; runs in a worker process or inline."""
    store = Store(job.dest, job.storage_options)
    offset = 0
    if source is None:
        source, offset = reopen(job.source, job.options)
    staging = store.staging_dir()
    writers: dict[str, _FieldWriter] = {}
    try:
        for index in range(job.start, job.stop):
            fields = source.fields(index - offset)
            if not writers:
                writers = {
                    name: _FieldWriter(staging, field_file(job.shard, name), arr)
                    for name, arr in fields.items()
                }
            if fields.keys() != writers.keys():
                raise CacheError(
                    f"sample {index} has fields {sorted(fields)}, sample {job.start} has "
                    f"{sorted(writers)}",
                    "every sample must have the same fields",
                )
            for name, array in fields.items():
                writers[name].add(index, array)
            if on_sample is not None:
                on_sample()
        for writer in writers.values():
            writer.close()
            store.commit_file(writer.tmp, writer.name)
    finally:
        for writer in writers.values():
            writer.discard()
    marker = {
        "build_key": job.build_key,
        "shard": job.shard,
        "start": job.start,
        "stop": job.stop,
        "fields": {name: w.summary() for name, w in writers.items()},
    }
    store.write_json(marker_file(job.shard), marker)
    return marker


class _FieldWriter:
    """Appends one field's samples to a temp file, hashing as it goes."""

    def __init__(self, staging: Path, name: str, first: np.ndarray) -> None:
        self.name = name
        self.dtype = first.dtype
        self.ndim = first.ndim
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=staging)
        self.tmp = Path(tmp)
        self.fh = os.fdopen(fd, "wb")
        self.digest = hashlib.sha256()
        self.nbytes = 0
        self.shapes: list[list[int]] = []

    def add(self, index: int, array: np.ndarray) -> None:
        if array.dtype != self.dtype or array.ndim != self.ndim:
            raise CacheError(
                f"field {self.name.split('.')[1]!r} of sample {index} is {array.dtype} with "
                f"{array.ndim} dimensions; earlier samples are {self.dtype} with {self.ndim}",
                "make the dataset return the same dtype and rank for every sample",
            )
        data = memoryview(array).cast("B") if array.ndim else array.tobytes()
        self.fh.write(data)
        self.digest.update(data)
        self.nbytes += array.nbytes
        self.shapes.append(list(array.shape))

    def close(self) -> None:
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()

    def discard(self) -> None:
        if not self.fh.closed:
            self.fh.close()
        self.tmp.unlink(missing_ok=True)

    def summary(self) -> dict[str, Any]:
        return {
            "file": self.name,
            "dtype": self.dtype.str,
            "ndim": self.ndim,
            "bytes": self.nbytes,
            "sha256": self.digest.hexdigest(),
            "shapes": self.shapes,
        }
