"""``torchdoctor cache build``: preprocess a source once into shards, in parallel, resumably."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
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

from .. import __version__
from ._format import (
    BUILD_DIR,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX,
    INDEX_DTYPE,
    MANIFEST,
    field_file,
    marker_file,
)
from ._sources import ImageOptions, Source, open_source, remember_source, reopen
from ._storage import CacheError, Store, file_lock

#: default bytes of one field file of one shard; big enough that per-file costs vanish, small
#: enough that a shard is a reasonable unit of resumption and of remote download
DEFAULT_SHARD_MB = 128
#: samples at which a build starts worker processes; below it, spawning them (about 0.3 s each
#: here) costs more than decoding (about 1.5 ms per 256x256 JPEG)
PARALLEL_MIN_SAMPLES = 2000


@dataclass(frozen=True)
class _ShardJob:
    dest: str
    storage_options: dict[str, Any]
    source: dict[str, Any]
    options: ImageOptions
    shard: int
    start: int
    stop: int
    build_key: str


def build_cache(
    source: str | os.PathLike[str] | Callable[[], Any],
    dest: str | os.PathLike[str],
    *,
    size: int | None = None,
    resize: str = "crop",
    mode: str = "RGB",
    encoded: bool = False,
    workers: int | None = None,
    shard_mb: float = DEFAULT_SHARD_MB,
    overwrite: bool = False,
    progress: bool = True,
    storage_options: dict[str, Any] | None = None,
    source_storage_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Preprocess ``source`` once and write a memory-mappable cache at ``dest``.

    Safe to call from several processes at once (they take turns on a lock; later ones find the
    cache built and return), and safe to interrupt: finished shards are kept and a new call with
    the same source and options resumes from them.

    Args:
        source: an image folder ``root/class_name/*.jpg`` (path or fsspec URL), a
            ``"module:callable"`` string, or a callable, returning a map-style Dataset whose samples
            are dicts/tuples of numpy arrays, tensors, PIL images, ints, floats or bytes.
        dest: the cache directory, a local path or an fsspec URL such as ``s3://bucket/cache``.
        size: resize images (PIL images and image-folder files) to this many pixels; see
            :class:`ImageOptions` for ``resize`` and ``mode``.
        resize: ``crop``, ``squash`` or ``shorter``.
        mode: ``RGB`` or ``L``.
        encoded: keep image files' encoded bytes (decoded on every read) instead of pixels.
        workers: processes that build shards; None picks one per CPU for large sources.
        shard_mb: target megabytes per shard file.
        overwrite: replace a cache at ``dest`` built from another source or with other options.
        progress: show a progress bar on stderr.
        storage_options: fsspec options for ``dest`` (e.g. ``{"endpoint_url": ...}`` for s3fs).
        source_storage_options: fsspec options for a remote image folder.

    Returns:
        The manifest of the finished cache.

    Raises:
        CacheError: bad source, a sample that cannot be stored, or a different cache at ``dest``.
    """
    options = ImageOptions(size=size, resize=resize, mode=mode, encoded=encoded)
    store = Store(dest, storage_options)
    src = open_source(
        source if callable(source) else os.fspath(source), options, source_storage_options
    )
    described = src.describe()
    build_key = _build_key(described, options)
    with file_lock(store.lock_path(), what=store.url, quiet=not progress):
        existing = _read_manifest(store)
        if existing is not None:
            if existing.get("build_key") == build_key:
                _say(progress, f"cache at {store.url} is up to date ({existing['count']} samples)")
                return existing
            if not overwrite:
                raise CacheError(
                    f"{store.url} holds a cache built from another source or with other options",
                    "pass --overwrite (overwrite=True) to replace it, or choose another DEST",
                )
            _remove_cache(store, existing)
        plan = _plan_shards(src, shard_mb)
        done = _finished_shards(store, plan, build_key)
        if done:
            _say(progress, f"resuming: {len(done)} of {len(plan)} shards already built")
        todo = [
            _ShardJob(
                store.url,
                store.storage_options,
                src.job_spec(start, stop),
                options,
                shard,
                start,
                stop,
                build_key,
            )
            for shard, (start, stop) in enumerate(plan)
            if shard not in done
        ]
        if workers is None:
            workers = 0 if len(src) < PARALLEL_MIN_SAMPLES else (os.cpu_count() or 1)
        workers = min(workers, len(todo))
        markers = dict(done)
        markers.update(_run_jobs(src, todo, workers, progress, total=len(src), already=done))
        manifest = _finish(store, src, described, options, plan, markers, build_key)
    _say(progress, f"built {store.url}: {manifest['count']} samples, {_size_text(manifest)}")
    return manifest


def _say(enabled: bool, text: str) -> None:
    if enabled:
        print(f"torchdoctor: {text}", file=sys.stderr)


def _build_key(described: dict[str, Any], options: ImageOptions) -> str:
    key = {
        "format_version": FORMAT_VERSION,
        "source": {k: described[k] for k in ("kind", "fingerprint")},
        "options": options.to_dict(),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _read_manifest(store: Store) -> dict[str, Any] | None:
    if not store.exists(MANIFEST):
        return None
    try:
        return store.read_json(MANIFEST)
    except (ValueError, OSError):
        return {"build_key": None}


def _remove_cache(store: Store, manifest: dict[str, Any]) -> None:
    # The manifest goes first: from then on readers see "no cache", never a mix of two caches.
    store.remove([MANIFEST, INDEX])
    files = [f["file"] for s in manifest.get("shards", []) for f in s.get("files", {}).values()]
    store.remove(files + store.list(BUILD_DIR))


def _plan_shards(src: Source, shard_mb: float) -> list[tuple[int, int]]:
    """Sample ranges of the shards; depends only on the source, so a resumed build agrees."""
    count = len(src)
    first = src.fields(0)
    sample_bytes = max(1, max(a.nbytes for a in first.values()))
    per_shard = max(1, int(shard_mb * 2**20) // sample_bytes)
    # At least 16 shards when the source allows it, so workers share the work and the progress
    # bar moves; but no shard below 64 samples, where per-file costs would show.
    per_shard = min(per_shard, max(64, math.ceil(count / 16)))
    return [(start, min(start + per_shard, count)) for start in range(0, count, per_shard)]


def _finished_shards(
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


def _run_jobs(
    src: Source,
    todo: list[_ShardJob],
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
                marker = _build_shard(job, source=src, on_sample=lambda: bar.advance(task))
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
            for marker in pool.imap_unordered(_build_shard, todo):
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


def _build_shard(
    job: _ShardJob, source: Source | None = None, on_sample: Callable[[], None] | None = None
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


def _finish(
    store: Store,
    src: Source,
    described: dict[str, Any],
    options: ImageOptions,
    plan: list[tuple[int, int]],
    markers: dict[int, dict[str, Any]],
    build_key: str,
) -> dict[str, Any]:
    """Check the shards agree, then write the index and, last of all, the manifest."""
    first = markers[0]["fields"]
    names = list(first)
    for shard in range(len(plan)):
        fields = markers[shard]["fields"]
        if list(fields) != names:
            raise CacheError(f"shard {shard} has fields {list(fields)}, shard 0 has {names}")
        for name in names:
            a, b = fields[name], first[name]
            if (a["dtype"], a["ndim"]) != (b["dtype"], b["ndim"]):
                raise CacheError(
                    f"field {name!r} is {a['dtype']}/{a['ndim']}-d in shard {shard} but "
                    f"{b['dtype']}/{b['ndim']}-d in shard 0",
                    "make the dataset return the same dtype and rank for every sample",
                )
    field_specs = []
    columns = ["shard", "row"]
    for name in names:
        shapes = {
            tuple(s) for shard in range(len(plan)) for s in markers[shard]["fields"][name]["shapes"]
        }
        fixed = len(shapes) == 1
        spec = {
            "name": name,
            "dtype": first[name]["dtype"],
            "ndim": first[name]["ndim"],
            "shape": list(next(iter(shapes))) if fixed else None,
            "bytes": sum(markers[s]["fields"][name]["bytes"] for s in range(len(plan))),
        }
        if not fixed:
            spec["index_column"] = len(columns)
            columns += [f"{name}.offset"] + [f"{name}.dim{j}" for j in range(spec["ndim"])]
        field_specs.append(spec)
    count = len(src)
    index = np.zeros((count, len(columns)), dtype=INDEX_DTYPE)
    shards = []
    for shard, (start, stop) in enumerate(plan):
        marker = markers[shard]
        index[start:stop, 0] = shard
        index[start:stop, 1] = np.arange(stop - start)
        for spec in field_specs:
            if spec["shape"] is not None:
                continue
            col = spec["index_column"]
            shapes = np.asarray(marker["fields"][spec["name"]]["shapes"], dtype=np.int64)
            shapes = shapes.reshape(stop - start, spec["ndim"])
            item = np.dtype(spec["dtype"]).itemsize
            sizes = np.prod(shapes, axis=1, dtype=np.int64) * item
            index[start:stop, col] = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            index[start:stop, col + 1 : col + 1 + spec["ndim"]] = shapes
        shards.append(
            {
                "count": stop - start,
                "files": {
                    name: {k: f[k] for k in ("file", "bytes", "sha256")}
                    for name, f in marker["fields"].items()
                },
            }
        )
    index_bytes = index.tobytes()
    image = _image_layout(field_specs)
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created_by": f"torchdoctor {__version__}",
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "count": count,
        "fields": field_specs,
        "image_layout": image,
        "index": {
            "file": INDEX,
            "dtype": INDEX_DTYPE,
            "columns": columns,
            "bytes": len(index_bytes),
            "sha256": hashlib.sha256(index_bytes).hexdigest(),
        },
        "shards": shards,
        "source": described,
        "options": options.to_dict(),
        "build_key": build_key,
    }
    store.write_bytes(INDEX, index_bytes)
    store.write_json(MANIFEST, manifest)
    store.remove(store.list(BUILD_DIR))
    _remove_empty_dir(store.staging_dir())  # and temp files a killed build left there
    return manifest


def _image_layout(field_specs: list[dict[str, Any]]) -> str | None:
    """``HWC`` when the cache holds uint8 images (a field ``image`` of rank 3), ``encoded`` when
    it holds image files' bytes."""
    for spec in field_specs:
        if spec["name"] == "image" and spec["dtype"] == "|u1" and spec["ndim"] == 3:
            return "HWC"
        if spec["name"] == "encoded" and spec["dtype"] == "|u1":
            return "encoded"
    return None


def _remove_empty_dir(path: Path) -> None:
    try:
        for stale in path.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        path.rmdir()
    except OSError:
        pass


def _size_text(manifest: dict[str, Any]) -> str:
    total = sum(f["bytes"] for f in manifest["fields"]) + manifest["index"]["bytes"]
    return f"{total / 2**20:.1f} MiB in {len(manifest['shards'])} shards"


def cache_image_folder(
    folder: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    size: int,
    resize: str = "crop",
    mode: str = "RGB",
    progress: bool = False,
    in_memory: bool = False,
) -> Any:
    """Build (if needed) a cache of an image folder at ``size`` pixels and open it.

    The quick path for scripts and the demo: a few hundred images are decoded in this process in
    about a second; a cache already built from the same folder and options is reused.

    Args:
        folder: ``folder/class_name/*.jpg|png``, a local path or fsspec URL.
        dest: where the cache goes.
        size: images become ``size`` x ``size`` (with ``resize="crop"``).
        resize: see :func:`build_cache`.
        mode: ``RGB`` or ``L``.
        progress: show the progress bar.
        in_memory: passed to :class:`CachedDataset`.

    Returns:
        A :class:`CachedDataset` whose samples are ``(uint8 HWC image, label)``.
    """
    from ._dataset import CachedDataset

    build_cache(folder, dest, size=size, resize=resize, mode=mode, progress=progress)
    return CachedDataset(dest, in_memory=in_memory)
