"""``torchdoctor cache build``: preprocess a source once into shards, in parallel, resumably."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .._errors import TorchdoctorError
from .._paths import check_output_dir
from ._format import (
    BUILD_DIR,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX,
    INDEX_DTYPE,
    MANIFEST,
)
from ._shards import ShardJob, finished_shards, plan_shards, run_jobs
from ._sources import ImageOptions, Source, open_source
from ._storage import CacheError, Store, file_lock

#: default bytes of one field file of one shard; big enough that per-file costs vanish, small
#: enough that a shard is a reasonable unit of resumption and of remote download
DEFAULT_SHARD_MB = 128
#: samples at which a build starts worker processes; below it, spawning them (about 0.3 s each
#: here) costs more than decoding (about 1.5 ms per 256x256 JPEG)
PARALLEL_MIN_SAMPLES = 2000


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
    _check_dest(store)
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
        plan = plan_shards(src, shard_mb)
        done = finished_shards(store, plan, build_key)
        if done:
            _say(progress, f"resuming: {len(done)} of {len(plan)} shards already built")
        todo = [
            ShardJob(
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
        markers.update(run_jobs(src, todo, workers, progress, total=len(src), already=done))
        manifest = _finish(store, src, described, options, plan, markers, build_key)
    _say(progress, f"built {store.url}: {manifest['count']} samples, {_size_text(manifest)}")
    return manifest


def _check_dest(store: Store) -> None:
    """Refuse a local DEST that cannot become a cache directory before reading the source.

    A file at DEST, a file on the way to it, or a place that takes no files (``/proc``, a
    read-only mount, no permission) used to surface as an OSError traceback from deep inside the
    build; here it is a :class:`CacheError` naming DEST and the fix. Remote stores are checked by
    their first write.
    """
    if not store.is_local:
        return
    try:
        check_output_dir(store.root, "DEST", shown=store.url)
    except TorchdoctorError as exc:
        raise CacheError(exc.message, exc.hint) from None


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
