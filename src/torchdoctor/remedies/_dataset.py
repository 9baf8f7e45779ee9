"""``CachedDataset``: random access to a built cache as numpy views of memory-mapped shards."""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ._collate import GatheredBatch, _shared_empty
from ._format import FIELD_DTYPES, FORMAT_NAME, FORMAT_VERSION, INDEX_DTYPE, MANIFEST
from ._sources import ImageOptions, decode_image
from ._storage import CacheError, Store, default_local_cache_dir, file_lock, sha256_file, url_key

_REBUILD = "rebuild it with `torchdoctor cache build SOURCE DEST --overwrite`"


class CachedDataset(Dataset):
    """A cache written by :func:`build_cache` (or ``torchdoctor cache build``), as a Dataset.

    ``ds[i]`` returns numpy arrays that are views into memory-mapped shard files, so reading a
    sample copies nothing, and DataLoader workers and DDP ranks on one machine share the same
    pages of the OS page cache instead of each holding a copy. For an image cache ``ds[i]`` is
    ``(image, label)`` with ``image`` a uint8 array in HWC layout (height, width, channels);
    :func:`uint8_collate` stacks such samples into an NCHW batch. Caches built from datasets with
    dict samples give dicts; others give tuples in field order.

    The cache is checked on open: the manifest, the size of every file and the checksum of the
    index. A partial or damaged cache is refused with a :class:`CacheError`. ``verify=True`` (or
    :meth:`verify`) also checks the checksum of every data file, which reads all of it.

    Args:
        path: the cache directory, a local path or an fsspec URL (``s3://bucket/cache``). A remote
            cache is downloaded once into ``cache_dir`` (checksums verified) and mapped from there.
        in_memory: read every file into this process's RAM instead of mapping it. With the default
            ``fork`` start method DataLoader workers share that memory; with ``spawn`` each worker
            reads its own copy. Mapping (the default) is already served from RAM once the OS has
            cached the files.
        verify: check every data file's checksum on open.
        cache_dir: local directory for copies of remote caches (default
            ``$TORCHDOCTOR_CACHE_DIR`` or ``~/.cache/torchdoctor``).
        storage_options: fsspec options for a remote ``path``.
        transform: optional callable applied to each sample (random augmentations go here).
        decode: for a cache built with ``encoded=True``, decode each image on read (the default)
            into a uint8 HWC array; False returns the encoded bytes as a uint8 array.

    Raises:
        CacheError: no cache, a partial or damaged one, or one of an unknown format version.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        in_memory: bool = False,
        verify: bool = False,
        cache_dir: str | os.PathLike[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        transform: Any = None,
        decode: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.in_memory = in_memory
        self.transform = transform
        store = Store(self.path, storage_options)
        if store.is_local:
            self.local_dir = store.local_path("")
            self.manifest = _load_manifest(store)
        else:
            self.local_dir, self.manifest = _download(store, cache_dir)
        _check_files(self.local_dir, self.manifest)
        self._index = _load_index(self.local_dir, self.manifest)
        if verify:
            problems = self.verify()
            if problems:
                raise CacheError(f"cache at {self.path} is damaged: {problems[0]}", _REBUILD)
        self.fields: list[dict[str, Any]] = self.manifest["fields"]
        self.field_names = [f["name"] for f in self.fields]
        self._sample_kind = _sample_kind(self.field_names)
        # An encoded cache holds the files' bytes; reads decode them (a copy, unlike pixels).
        self._decode = None
        if self.field_names == ["encoded", "label"] and decode:
            self._decode = ImageOptions(mode=self.manifest["options"].get("mode", "RGB"))
        self._shards: list[dict[str, np.ndarray]] | None = None
        self._pid = -1

    # --- information -----------------------------------------------------------------------

    @property
    def classes(self) -> list[str]:
        """Class names of an image-folder cache, in label order (empty otherwise)."""
        return list(self.manifest["source"].get("classes", []))

    @property
    def nbytes(self) -> int:
        """Bytes of sample data in the cache."""
        return sum(int(f["bytes"]) for f in self.fields)

    def __len__(self) -> int:
        return int(self.manifest["count"])

    def __repr__(self) -> str:
        return f"CachedDataset({self.path!r}, {len(self)} samples, fields={self.field_names})"

    # --- access ----------------------------------------------------------------------------

    def __getitem__(self, index: int) -> Any:
        if self._pid != os.getpid():
            self._open()
        count = len(self)
        i = int(index)
        if i < 0:
            i += count
        if not 0 <= i < count:
            raise IndexError(f"index {index} out of range for {count} samples")
        row_info = self._index[i]
        shard = self._shards[int(row_info[0])]
        row = int(row_info[1])
        values = []
        for spec in self.fields:
            data = shard[spec["name"]]
            if spec["shape"] is not None:
                values.append(data[row])
            else:
                col = spec["index_column"]
                offset = int(row_info[col])
                dims = tuple(int(d) for d in row_info[col + 1 : col + 1 + spec["ndim"]])
                dtype = FIELD_DTYPES[spec["dtype"]]
                nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
                values.append(data[offset : offset + nbytes].view(dtype).reshape(dims))
        if self._decode is not None:
            values[0] = decode_image(values[0].tobytes(), self._decode)
        if self._sample_kind == "dict":
            sample: Any = dict(zip(self.field_names, values, strict=True))
        elif self._sample_kind == "single":
            sample = values[0]
        else:
            sample = tuple(values)
        return self.transform(sample) if self.transform is not None else sample

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Read the samples at ``indices`` at once; the DataLoader calls it for each batch.

        Returns the same samples as ``[ds[i] for i in indices]``, in that order, as a list
        (a :class:`GatheredBatch`): any ``collate_fn`` works on it unchanged. When every field
        has a fixed shape and there is no ``transform`` or decoding, the batch is copied into
        one array per field (in shared memory inside a DataLoader worker) and the samples are
        views into those arrays, so :func:`uint8_collate` returns them with no further copy.
        Otherwise (variable-size fields, an encoded cache, a transform) it reads sample by
        sample, as without this method.
        """
        if not self._gathers:
            return [self[i] for i in indices]
        if self._pid != os.getpid():
            self._open()
        count = len(self)
        positions = np.asarray(indices, dtype=np.int64).reshape(-1)
        positions = np.where(positions < 0, positions + count, positions)
        if positions.size and (positions.min() < 0 or positions.max() >= count):
            bad = next(i for i in indices if not -count <= int(i) < count)
            raise IndexError(f"index {bad} out of range for {count} samples")
        rows_info = self._index[positions]
        shard_ids = rows_info[:, 0].tolist()
        rows = rows_info[:, 1].tolist()
        columns = {}
        for spec in self.fields:
            name = spec["name"]
            dtype = FIELD_DTYPES[spec["dtype"]]
            column = _shared_empty((len(rows), *spec["shape"]), _torch_dtype(dtype))
            out = column.numpy()
            if len(self._shards) == 1:
                np.take(self._shards[0][name], rows_info[:, 1], axis=0, out=out)
            else:
                for k, (shard, row) in enumerate(zip(shard_ids, rows, strict=True)):
                    out[k] = self._shards[shard][name][row]
            columns[name] = column
        return GatheredBatch(columns, self._sample_kind)

    @property
    def _gathers(self) -> bool:
        """Whether ``__getitems__`` can copy whole batches (fixed shapes, nothing per sample)."""
        return (
            self.transform is None
            and self._decode is None
            and bool(self.fields)
            and all(spec["shape"] is not None for spec in self.fields)
        )

    def _open(self) -> None:
        """Map (or read) every shard file; done lazily in each process that reads."""
        shards = []
        for shard in self.manifest["shards"]:
            arrays = {}
            for spec in self.fields:
                info = shard["files"][spec["name"]]
                raw = _map_file(self.local_dir / info["file"], info["bytes"], self.in_memory)
                if spec["shape"] is not None:
                    dtype = FIELD_DTYPES[spec["dtype"]]
                    raw = raw.view(dtype).reshape((shard["count"], *spec["shape"]))
                arrays[spec["name"]] = raw
            shards.append(arrays)
        self._shards = shards
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        # Sent to spawned workers: maps are reopened there, never pickled.
        state = dict(self.__dict__)
        state["_shards"] = None
        state["_pid"] = -1
        return state

    def verify(self) -> list[str]:
        """Check every file's sha256 against the manifest; returns the problems found (or [])."""
        return verify_files(self.local_dir, self.manifest)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of numpy ``dtype`` (every cache field dtype has one from torch 2.3 on)."""
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _sample_kind(names: list[str]) -> str:
    """How samples come back: the shape the source gave them (see ``_sources.to_fields``)."""
    if names == ["0"] or names == ["image"]:
        return "single"
    if names in (["image", "label"], ["encoded", "label"]) or all(n.isdigit() for n in names):
        return "tuple"
    return "dict"


def _map_file(path: Path, nbytes: int, in_memory: bool) -> np.ndarray:
    if nbytes == 0:
        return np.empty(0, dtype=np.uint8)
    if in_memory:
        return np.fromfile(path, dtype=np.uint8)
    with open(path, "rb") as fh:
        # ACCESS_COPY (a private mapping): arrays are writable, as torch.from_numpy expects, but a
        # write stays in this process and never reaches the file; reads share the page cache.
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    return np.frombuffer(mapped, dtype=np.uint8)


def _load_manifest(store: Store) -> dict[str, Any]:
    if not store.exists(MANIFEST):
        building = store.list("_build")
        if building or store.exists("_build"):
            raise CacheError(
                f"cache at {store.url} is incomplete: its build did not finish "
                f"({sum(n.endswith('.json') for n in building)} shard(s) done)",
                "run the same `torchdoctor cache build SOURCE DEST` again; it resumes",
            )
        raise CacheError(
            f"no torchdoctor cache at {store.url} (no {MANIFEST})",
            "build one with `torchdoctor cache build SOURCE DEST`",
        )
    try:
        manifest = store.read_json(MANIFEST)
    except (ValueError, UnicodeDecodeError):
        raise CacheError(f"the manifest of {store.url} is not valid JSON", _REBUILD) from None
    return check_manifest(manifest, store.url)


def check_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """Refuse a manifest that is not a torchdoctor cache of a version this code reads."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise CacheError(f"{where} is not a torchdoctor cache (unknown manifest)", _REBUILD)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CacheError(
            f"cache at {where} has format version {manifest.get('format_version')}; this "
            f"torchdoctor reads version {FORMAT_VERSION}",
            _REBUILD,
        )
    try:
        for spec in manifest["fields"]:
            if spec["dtype"] not in FIELD_DTYPES:
                raise CacheError(f"cache at {where} has a field of dtype {spec['dtype']}", _REBUILD)
        int(manifest["count"])
        manifest["index"]["sha256"]
        for shard in manifest["shards"]:
            for spec in manifest["fields"]:
                shard["files"][spec["name"]]["bytes"]
    except (KeyError, TypeError):
        raise CacheError(
            f"the manifest of {where} is damaged (missing entries)", _REBUILD
        ) from None
    return manifest


def _all_files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    files = [manifest["index"]]
    files += [f for shard in manifest["shards"] for f in shard["files"].values()]
    return files


def _check_files(local_dir: Path, manifest: dict[str, Any]) -> None:
    """Every file present with the size the manifest gives."""
    for info in _all_files(manifest):
        path = local_dir / info["file"]
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            raise CacheError(f"cache file {path} is missing", _REBUILD) from None
        if actual != info["bytes"]:
            raise CacheError(
                f"cache file {path} has {actual} bytes, the manifest says {info['bytes']} "
                "(truncated or overwritten)",
                _REBUILD,
            )


def _load_index(local_dir: Path, manifest: dict[str, Any]) -> np.ndarray:
    """Read the index, check its checksum and that every entry points inside its shard."""
    info = manifest["index"]
    raw = (local_dir / info["file"]).read_bytes()
    if hashlib.sha256(raw).hexdigest() != info["sha256"]:
        raise CacheError(f"the index of {local_dir} does not match its checksum", _REBUILD)
    columns = len(info["columns"])
    count = int(manifest["count"])
    if info["dtype"] != INDEX_DTYPE or len(raw) != count * columns * 8:
        raise CacheError(f"the index of {local_dir} has the wrong size", _REBUILD)
    index = np.frombuffer(raw, dtype=INDEX_DTYPE).reshape(count, columns).astype(np.int64)
    shards = manifest["shards"]
    if count:
        shard_ids = index[:, 0]
        if shard_ids.min() < 0 or shard_ids.max() >= len(shards):
            raise CacheError(f"the index of {local_dir} names shards that do not exist", _REBUILD)
        rows_per_shard = np.asarray([s["count"] for s in shards], dtype=np.int64)
        if ((index[:, 1] < 0) | (index[:, 1] >= rows_per_shard[shard_ids])).any():
            raise CacheError(f"the index of {local_dir} names rows past a shard's end", _REBUILD)
    for spec in manifest["fields"]:
        item = np.dtype(FIELD_DTYPES[spec["dtype"]]).itemsize
        if spec["shape"] is not None:
            per_row = int(np.prod(spec["shape"], dtype=np.int64)) * item
            for shard in shards:
                if shard["files"][spec["name"]]["bytes"] != shard["count"] * per_row:
                    raise CacheError(
                        f"field {spec['name']!r} of {local_dir} does not hold whole samples",
                        _REBUILD,
                    )
        elif count:
            col = spec["index_column"]
            dims = index[:, col + 1 : col + 1 + spec["ndim"]]
            ends = index[:, col] + np.prod(dims, axis=1, dtype=np.int64) * item
            limits = np.asarray(
                [s["files"][spec["name"]]["bytes"] for s in shards], dtype=np.int64
            )[index[:, 0]]
            if (index[:, col] < 0).any() or (dims < 0).any() or (ends > limits).any():
                raise CacheError(
                    f"the index of {local_dir} points past the end of field {spec['name']!r}",
                    _REBUILD,
                )
    index.setflags(write=False)
    return index


def verify_files(local_dir: Path, manifest: dict[str, Any]) -> list[str]:
    """Problems found by checking the size and sha256 of every file of a cache."""
    problems = []
    for info in _all_files(manifest):
        path = local_dir / info["file"]
        if not path.exists():
            problems.append(f"{info['file']}: missing")
        elif path.stat().st_size != info["bytes"]:
            problems.append(
                f"{info['file']}: {path.stat().st_size} bytes, expected {info['bytes']}"
            )
        elif sha256_file(path) != info["sha256"]:
            problems.append(f"{info['file']}: checksum mismatch")
    return problems


def open_manifest(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The checked manifest of the cache at ``path`` (local or remote), without opening data."""
    store = Store(path, storage_options)
    return _load_manifest(store)


def _download(
    store: Store, cache_dir: str | os.PathLike[str] | None
) -> tuple[Path, dict[str, Any]]:
    """Copy a remote cache to local disk once (verified), keyed by URL and index checksum."""
    manifest = _load_manifest(store)
    base = Path(cache_dir) if cache_dir is not None else default_local_cache_dir() / "remote"
    local_dir = base / f"{url_key(store.url)}-{manifest['index']['sha256'][:16]}"
    local_dir.mkdir(parents=True, exist_ok=True)
    local_manifest = local_dir / MANIFEST
    if local_manifest.exists():
        return local_dir, manifest
    with file_lock(local_dir / ".lock", what=f"a local copy of {store.url}", quiet=True):
        if local_manifest.exists():  # another process finished the copy while we waited
            return local_dir, manifest
        for info in _all_files(manifest):
            target = local_dir / info["file"]
            if target.exists() and target.stat().st_size == info["bytes"]:
                continue  # a finished download (files appear only after their checksum passed)
            tmp = local_dir / f".{info['file']}.{os.getpid()}.tmp"
            try:
                store.fs.get_file(store.path(info["file"]), str(tmp))
                if sha256_file(tmp) != info["sha256"]:
                    raise CacheError(
                        f"{store.url}/{info['file']} does not match the checksum in its manifest",
                        _REBUILD,
                    )
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
        Store(str(local_dir)).write_json(MANIFEST, manifest)
    return local_dir, manifest
