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
_SCENARIOS_DIR = os.path.join(_TORCHDOCTOR_DIR, "cli", "demo", "scenarios")
_STDLIB_DIRS = tuple(
    {_norm(p) for key in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(key))}
)
_PACKAGE_PARTS = ("site-packages", "dist-packages")


#: torch code that calls tensor operations on purpose as part of its own machinery (optimizer
#: steps, the DataLoader, the AMP scaler, gradient clipping, DDP). An operation reached through
#: one of these is not the user's line to fix, so it is not reported.
def _torch_paths(*parts: str) -> tuple[str, ...]:
    return tuple(os.path.join(_TORCH_DIR or "", *part.split("/")) for part in parts)


_TORCH_MACHINERY = _torch_paths(
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
_DATALOADER_PREFIX = os.path.join(_TORCH_DIR or "", "utils", "data")
#: The watcher's own files, and the capture's wrappers of torch functions (``Tensor.to``): the
#: frames between an operation and the user's line that called it.
_WATCHER_FILES = frozenset(
    os.path.join(_TORCHDOCTOR_DIR, "capture", name)
    for name in (
        "syncs.py",
        "_sync_watcher.py",
        "_sync_rules.py",
        "_sync_ops.py",
        "_frames.py",
        "_hooks.py",
    )
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


#: torch's own dispatch layers: Python wrappers that hand a whole call to the function mode
#: (``handle_torch_function``). They sit between the user's call and the operation without being
#: a place where torch chose to make it, so they are never a finding's library site.
_TORCH_WRAPPERS = _torch_paths(
    "overrides.py",
    "_tensor.py",
    "_tensor_str.py",
    "functional.py",
    "_jit_internal.py",
    "nn/functional.py",
    "utils/_device.py",
)
#: Library frames kept per site, innermost first: enough to recognise the library's own call
#: chain (e.g. Lightning's logger connector under a generic helper), cheap to keep.
_CHAIN_LIMIT = 8


@dataclass(frozen=True)
class Site:
    """A place in the user's code, and the library code between it and the operation."""

    file: str
    line: int
    source: str
    #: ``file:line`` of the innermost library frame between the operation and the user's line,
    #: when the operation was made by a library the user called (e.g. Lightning): where it happens.
    via: str | None = None
    #: The source line at ``via``.
    via_source: str | None = None
    #: The top-level package ``via`` belongs to (``transformers``, ``pytorch_lightning``, ``torch``).
    library: str | None = None
    #: The library frames as ``package/path.py:function``, innermost first (at most 8).
    library_calls: tuple[str, ...] = ()


def user_site(frame: FrameType | None = None) -> Site | None:
    """The user's line that led to the current operation, or ``None`` when it should be skipped.

    Skipped: no user frame on the stack, an operation made by torch's own machinery (see
    ``_TORCH_MACHINERY``) or by torchdoctor itself (the runner's timing, a remedy's batch
    copy), and anything run while the DataLoader fetches a batch (a Dataset's ``__getitem__``
    is user code but works on host data by design). Library frames (installed packages, and
    torch's own code outside its dispatch wrappers) between the operation and the user's line
    are kept in the site: the innermost is where the operation happens.
    """
    f = frame if frame is not None else sys._getframe(1)
    chain: list[FrameType] = []
    site: Site | None = None
    while f is not None:
        filename = f.f_code.co_filename
        kind = file_kind(filename)
        if site is None:
            if kind == "user":
                site = _site(f, chain)
            elif kind == "torch":
                if _norm_prefix(filename, _TORCH_MACHINERY):
                    return None
                if len(chain) < _CHAIN_LIMIT and not _norm_prefix(filename, _TORCH_WRAPPERS):
                    chain.append(f)
            elif kind == "library" and len(chain) < _CHAIN_LIMIT:
                chain.append(f)
            elif kind == "torchdoctor" and _norm(filename) not in _WATCHER_FILES:
                return None
        elif kind == "torch" and _norm_prefix(filename, (_DATALOADER_PREFIX,)):
            return None
        f = f.f_back
    return site


def _site(user: FrameType, chain: list[FrameType]) -> Site:
    filename = user.f_code.co_filename
    source = linecache.getline(filename, user.f_lineno).strip()
    if not chain:
        return Site(filename, user.f_lineno, source)
    inner = chain[0]
    inner_file = inner.f_code.co_filename
    return Site(
        filename,
        user.f_lineno,
        source,
        via=f"{inner_file}:{inner.f_lineno}",
        via_source=statement_at(inner_file, inner.f_lineno),
        library=library_path(inner_file).split("/", 1)[0].removesuffix(".py"),
        library_calls=tuple(
            f"{library_path(c.f_code.co_filename)}:{c.f_code.co_name}" for c in chain
        ),
    )


def statement_at(filename: str, lineno: int, max_lines: int = 8) -> str:
    """The source at ``lineno``, continued while brackets stay open (``if (`` spans lines)."""
    parts: list[str] = []
    depth = 0
    for n in range(lineno, lineno + max_lines):
        text = linecache.getline(filename, n).strip()
        parts.append(text)
        depth += sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")
        if depth <= 0 or not text:
            break
    return " ".join(p for p in parts if p).replace("( ", "(").replace(" )", ")")


_library_path_cache: dict[str, str] = {}


def library_path(filename: str) -> str:
    """A library file's path from its top-level package: ``transformers/trainer.py``."""
    found = _library_path_cache.get(filename)
    if found is None:
        parts = _norm(filename).split(os.sep)
        if _TORCH_DIR is not None and _under(_norm(filename), _TORCH_DIR):
            start = len(_TORCH_DIR.split(os.sep)) - 1
        else:
            marks = [i for i, part in enumerate(parts) if part in _PACKAGE_PARTS]
            start = marks[-1] + 1 if marks else len(parts) - 1
        found = _library_path_cache[filename] = "/".join(parts[start:])
    return found


_prefix_cache: dict[tuple[str, tuple[str, ...]], bool] = {}


def _norm_prefix(filename: str, prefixes: tuple[str, ...]) -> bool:
    key = (filename, prefixes)
    hit = _prefix_cache.get(key)
    if hit is None:
        path = _norm(filename)
        hit = any(_under(path, _norm(p)) for p in prefixes)
        _prefix_cache[key] = hit
    return hit


def innermost_user_line(error: BaseException) -> tuple[str, str]:
    """The innermost line of the user's code in ``error``'s traceback (``file:line``) and its
    statement; ``("", "")`` when no frame of it is the user's."""
    found = ("", "")
    tb = error.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if is_user_file(filename):
            found = (f"{filename}:{tb.tb_lineno}", statement_at(filename, tb.tb_lineno))
        tb = tb.tb_next
    return found


#: Statements read after a value's assignment for where it goes (an action to ``env.step``).
_FOLLOWING = 4


def value_user(site: Site) -> str | None:
    """Where a value read off the device at ``site`` is handed on at once: to a call in the same
    statement (``env.step(action.item())``), in the next few statements of the frame that
    assigns it, or, for ``return action.item()``, of the caller's that assigns the result
    (pytorch/examples' reinforce: ``action = select_action(state)`` then ``env.step(action)``).
    Read only for the few syncs of the watched steps."""
    from ..analysis.sync_uses import assigned_name, returns, used_at_once, used_later

    direct = used_at_once(site.source)
    if direct is not None:
        return direct
    frame = sys._getframe(1)
    while frame is not None and not (
        frame.f_code.co_filename == site.file and frame.f_lineno == site.line
    ):
        frame = frame.f_back
    if frame is None:
        return None
    statement = site.source
    if returns(statement):  # the caller's statement receives it
        frame = frame.f_back
        while frame is not None and not is_user_file(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return None
        statement = statement_at(frame.f_code.co_filename, frame.f_lineno)
        direct = used_at_once(statement)
        if direct is not None:
            return direct
    name = assigned_name(statement)
    if name is None:
        return None
    filename, line = frame.f_code.co_filename, frame.f_lineno
    following = [statement_at(filename, n) for n in range(line + 1, line + 1 + _FOLLOWING)]
    return used_later(name, [s for s in following if s])
