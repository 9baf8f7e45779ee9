"""The one folder an agent's calls may read and write under (``torchdoctor mcp --root``)."""

from __future__ import annotations

import os
import time
from itertools import count
from pathlib import Path

from .._errors import TorchdoctorError
from .._paths import existing_dir, ignored_dir, lies_under

#: Where the server keeps what it writes under the root: records and patches.
OWN_DIR = ".torchdoctor"

_names = count(1)


class OutsideRoot(TorchdoctorError):
    """A path an agent gave is not under the server's root (or leads out of it)."""


class Root:
    """The server's root folder: every path a call names is checked against it."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = existing_dir(
            folder, "--root", "pass the folder holding the scripts to diagnose"
        )

    def holds(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path``, with every symlink on its way followed, lies under the root."""
        return lies_under(path, self.path)

    def inside(self, path: str, what: str, *, exists: bool = True) -> Path:
        """``path`` (relative paths mean under the root) checked to lie under the root, every
        symlink followed; with ``exists``, it must exist.

        Raises:
            OutsideRoot: the path leads out of the root (or is missing), in words naming both.
        """
        if not isinstance(path, str) or not path.strip():
            raise OutsideRoot(f"no {what} given", f"name a {what} under {self.path}")
        if "\0" in path:
            raise OutsideRoot(f"{what} {path!r}: a path holds no null byte", f"name a {what}")
        given = Path(path).expanduser()
        full = given if given.is_absolute() else self.path / given
        if not self.holds(full):
            raise OutsideRoot(
                f"{what} {path}: outside the server's root {self.path} (symlinks followed)",
                f"name a {what} under {self.path}, or start `torchdoctor mcp --root` higher",
            )
        real = Path(os.path.realpath(full))
        if exists and not real.exists():
            raise OutsideRoot(f"{what} {path}: no such file under {self.path}", "check the path")
        return real

    def new_file(self, kind: str, stem: str, suffix: str) -> Path:
        """A fresh path under ``<root>/.torchdoctor/<kind>/`` for something a call writes."""
        folder = ignored_dir(self.path / OWN_DIR, kind)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return folder / f"{stem}-{stamp}-{os.getpid()}-{next(_names)}{suffix}"
