"""Files of a cache through fsspec: local paths and object-store URLs alike, written atomically."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._errors import TorchdoctorError
from .._optional import require

#: bytes read per call when hashing; large enough that hashing runs at the digest's speed
_HASH_BLOCK = 8 << 20


class CacheError(TorchdoctorError):
    """A cache that cannot be built or read as asked: missing, partial, corrupt or mismatched."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Raised in build workers and sent to the parent: keep the hint across pickling.
        return (type(self), (self.message, self.hint))


def default_local_cache_dir() -> Path:
    """Where local copies of remote shards live: $TORCHDOCTOR_CACHE_DIR or ~/.cache/torchdoctor."""
    root = os.environ.get("TORCHDOCTOR_CACHE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchdoctor"


class Store:
    """One cache directory (``DEST``) on any fsspec filesystem.

    On a local filesystem a finished file is moved into place with ``os.replace``; on an object
    store one PUT of a whole object is atomic, so readers never see half a file either way.
    """

    def __init__(self, url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None):
        fsspec = require("fsspec", "reading and writing torchdoctor caches")
        self.url = os.fspath(url)
        self.storage_options = dict(storage_options or {})
        self.fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        self.root = root.rstrip("/") or root
        protocol = self.fs.protocol
        protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
        self.is_local = "file" in protocols or "local" in protocols

    def path(self, name: str) -> str:
        """Full path of ``name`` inside the cache, as the filesystem spells it."""
        return f"{self.root}/{name}"

    def local_path(self, name: str) -> Path:
        """A path that ``open`` and ``mmap`` accept; only for local stores."""
        assert self.is_local, "local_path() of a remote store"
        return Path(self.path(name))

    def exists(self, name: str) -> bool:
        """Whether ``name`` exists in the cache."""
        return bool(self.fs.exists(self.path(name)))

    def size(self, name: str) -> int | None:
        """Size of ``name`` in bytes, or None when it does not exist."""
        try:
            return int(self.fs.size(self.path(name)))
        except (FileNotFoundError, OSError):
            return None

    def read_bytes(self, name: str) -> bytes:
        """The whole content of ``name``."""
        return self.fs.cat_file(self.path(name))

    def read_json(self, name: str) -> Any:
        """``name`` parsed as JSON."""
        return json.loads(self.read_bytes(name).decode("utf-8"))

    def list(self, prefix: str = "") -> list[str]:
        """Names (relative to the cache root) of the files under ``prefix``."""
        base = self.path(prefix).rstrip("/") if prefix else self.root
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        root = self.root.rstrip("/") + "/"
        return sorted(p[len(root) :] if p.startswith(root) else p for p in found)

    def makedirs(self, name: str = "") -> None:
        """Create a directory in the cache (a no-op on object stores)."""
        if self.is_local:
            Path(self.path(name) if name else self.root).mkdir(parents=True, exist_ok=True)

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``name`` atomically: readers see the old file, no file, or all of ``data``."""
        if self.is_local:
            target = self.local_path(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        else:
            self.fs.pipe_file(self.path(name), data)

    def write_json(self, name: str, data: Any) -> None:
        """Write ``data`` as JSON, atomically."""
        self.write_bytes(name, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())

    def commit_file(self, local_tmp: Path, name: str) -> None:
        """Move a finished local file to ``name``: a rename locally, one upload remotely."""
        if self.is_local:
            target = self.local_path(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(local_tmp, target)
        else:
            self.fs.put_file(str(local_tmp), self.path(name))
            local_tmp.unlink(missing_ok=True)

    def remove(self, names: list[str]) -> None:
        """Delete files, ignoring those already gone."""
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.path(name))

    def staging_dir(self) -> Path:
        """A local directory for files being written before they are committed.

        For a local cache it sits inside the cache (same filesystem, so commits are renames); for a
        remote cache it is under the local cache directory, keyed by the URL.
        """
        if self.is_local:
            d = self.local_path("_build")
        else:
            d = default_local_cache_dir() / "staging" / url_key(self.url)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def lock_path(self) -> Path:
        """The local file whose lock serialises builders of this cache on this machine."""
        if self.is_local:
            self.makedirs()
            return self.local_path(".lock")
        d = default_local_cache_dir() / "locks"
        d.mkdir(parents=True, exist_ok=True)
        return d / f"{url_key(self.url)}.lock"


def url_key(url: str) -> str:
    """A short, filesystem-safe key for a URL."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a local file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def file_lock(path: Path, *, what: str, quiet: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (released by the OS even if the process is killed)."""
    if sys.platform == "win32":  # pragma: no cover - no fcntl; builds are not serialised there
        yield
        return
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not quiet:
                print(f"torchdoctor: waiting for another process building {what}", file=sys.stderr)
            started = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not quiet:
                waited_s = time.monotonic() - started
                print(f"torchdoctor: lock acquired after {waited_s:.1f} s", file=sys.stderr)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
