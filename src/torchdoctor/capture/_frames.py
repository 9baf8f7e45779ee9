"""Which stack frame is the user's: the first outside torch, torchdoctor, the stdlib and site-packages."""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {
        paths.get("stdlib"),
        paths.get("platstdlib"),
        paths.get("purelib"),
        paths.get("platlib"),
    }
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)


_LIBRARY_DIRS = _library_dirs()


def is_user_file(filename: str) -> bool:
    """Whether ``filename`` is the user's code (not a library, not torchdoctor, not frozen)."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep):
        return False
    if "site-packages" in path or "dist-packages" in path:
        return False
    return not path.startswith(_LIBRARY_DIRS)


def user_site(skip: int = 1) -> tuple[str, int] | None:
    """``(file, line)`` of the innermost user frame above the caller."""
    frame: FrameType | None = sys._getframe(skip)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None
