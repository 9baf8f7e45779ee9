"""Which Python frame is the user's: the line a finding points at.

The rule: the first frame, walking out from the operation, whose file is not inside torch,
torchdoctor, the Python standard library or an installed package (``site-packages`` /
``dist-packages``). A Lightning user's ``LightningModule`` file is user code; Lightning's own
files are not. torchdoctor's bundled demo scenarios count as user code, because they play the
part of a user's script.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import sys
import sysconfig
from dataclasses import dataclass
from types import FrameType


def _package_dir(name: str) -> str | None:
    """Directory of an importable package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return _norm(next(iter(spec.submodule_search_locations)))


def _norm(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def _under(path: str, folder: str | None) -> bool:
    return folder is not None and (path == folder or path.startswith(folder + os.sep))


_TORCH_DIR = _package_dir("torch")
_TORCHDOCTOR_DIR = _norm(os.path.dirname(os.path.dirname(__file__)))
_SCENARIOS_DIR = os.path.join(_TORCHDOCTOR_DIR, "scenarios")
_STDLIB_DIRS = tuple(
    {_norm(p) for key in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(key))}
)
_PACKAGE_PARTS = ("site-packages", "dist-packages")

#: torch code that calls tensor operations on purpose as part of its own machinery (optimizer
#: steps, the DataLoader, the AMP scaler, gradient clipping, DDP). An operation reached through
#: one of these is not the user's line to fix, so it is not reported.
_TORCH_MACHINERY = tuple(
    os.path.join(_TORCH_DIR or "", *part.split("/"))
    for part in (
        "optim",
        "utils/data",
        "amp",
        "cuda/amp",
        "nn/utils/clip_grad.py",
        "nn/parallel",
        "distributed",
        "autograd",
        "_dynamo",
        "profiler",
    )
)
_DATALOADER_PREFIX = os.path.join(_TORCH_DIR or "", "utils", "data")
#: The watcher's own files: the frames between an operation and its caller.
_WATCHER_FILES = frozenset(
    os.path.join(_TORCHDOCTOR_DIR, "capture", name)
    for name in ("syncs.py", "_sync_watcher.py", "_sync_rules.py", "_sync_ops.py", "_frames.py")
)

_kind_cache: dict[str, str] = {}


def file_kind(filename: str) -> str:
    """Classify a code file: ``user``, ``torch``, ``torchdoctor``, ``stdlib`` or ``library``."""
    kind = _kind_cache.get(filename)
    if kind is None:
        kind = _classify(filename)
        _kind_cache[filename] = kind
    return kind


def _classify(filename: str) -> str:
    if filename.startswith("<"):
        # "<frozen importlib._bootstrap>" is the stdlib; "<stdin>", "<string>" and notebook
        # cells ("<ipython-input-3-...>") are code the user typed.
        return "stdlib" if filename.startswith("<frozen") else "user"
    path = _norm(filename)
    if _under(path, _TORCHDOCTOR_DIR) and not _under(path, _SCENARIOS_DIR):
        return "torchdoctor"
    if _under(path, _TORCH_DIR):
        return "torch"
    if any(part in _PACKAGE_PARTS for part in path.split(os.sep)):
        return "library"
    if any(_under(path, d) for d in _STDLIB_DIRS):
        return "stdlib"
    return "user"


def is_user_file(filename: str) -> bool:
    """True when ``filename`` is the user's code under the rule in this module's docstring."""
    return file_kind(filename) == "user"


@dataclass(frozen=True)
class Site:
    """A place in the user's code."""

    file: str
    line: int
    source: str
    #: ``file:line`` of the innermost library frame between the operation and the user's line,
    #: when the operation was made by a library the user called (e.g. Lightning).
    via: str | None = None


def user_site(frame: FrameType | None = None) -> Site | None:
    """The user's line that led to the current operation, or ``None`` when it should be skipped.

    Skipped: no user frame on the stack, an operation made by torch's own machinery (see
    ``_TORCH_MACHINERY``) or by torchdoctor itself (the runner's timing, a remedy's batch
    copy), and anything run while the DataLoader fetches a batch (a Dataset's ``__getitem__``
    is user code but works on host data by design).
    """
    f = frame if frame is not None else sys._getframe(1)
    via: str | None = None
    site: Site | None = None
    while f is not None:
        filename = f.f_code.co_filename
        kind = file_kind(filename)
        if site is None:
            if kind == "user":
                source = linecache.getline(filename, f.f_lineno).strip()
                site = Site(filename, f.f_lineno, source, via)
            elif kind == "torch":
                if _norm_prefix(filename, _TORCH_MACHINERY):
                    return None
            elif kind == "library" and via is None:
                via = f"{filename}:{f.f_lineno}"
            elif kind == "torchdoctor" and _norm(filename) not in _WATCHER_FILES:
                return None
        elif kind == "torch" and _norm_prefix(filename, (_DATALOADER_PREFIX,)):
            return None
        f = f.f_back
    return site


_prefix_cache: dict[tuple[str, tuple[str, ...]], bool] = {}


def _norm_prefix(filename: str, prefixes: tuple[str, ...]) -> bool:
    key = (filename, prefixes)
    hit = _prefix_cache.get(key)
    if hit is None:
        path = _norm(filename)
        hit = any(_under(path, _norm(p)) for p in prefixes)
        _prefix_cache[key] = hit
    return hit
