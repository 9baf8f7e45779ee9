"""Output paths checked before any work, so a bad path costs a message, not a finished run.

``torchdoctor run --json PATH`` used to learn that PATH was a directory (or unwritable) only when
it saved the record, after the whole run; ``--trace DIR`` in an unwritable place failed inside
the profiler as "torchdoctor itself failed". Each flag that names an output checks it here first,
and gets back the path made absolute: a relative path means the directory torchdoctor was
started in, even when the script ``os.chdir``s before the file is written.

Writability is tried, not guessed: ``os.access`` says yes to root on a read-only filesystem or
in ``/proc``, so a probe file is made in the nearest directory that exists, and removed at once.
Nothing is created for the output itself (no directory is made before the run needs it).

``--json -`` (:func:`record_on_stdout`, at the end) sends the record to standard output instead,
and everything else the command and its script print to standard error.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._errors import TorchdoctorError

__all__ = ["OutputPathError", "check_output_dir", "check_output_file"]


class OutputPathError(TorchdoctorError):
    """An output path that cannot be written: a directory where a file is meant, or the reverse,
    a file in the way, or no permission. Exit status 2, like every bad input."""


def check_output_file(path: str | os.PathLike[str], flag: str, example: str = "run.json") -> str:
    """See :func:`_check_output_file`; an OS refusal (a name too long, ...) is a bad path too."""
    return _os_errors_are_bad_paths(path, flag, lambda: _check_output_file(path, flag, example))


def _check_output_file(path: str | os.PathLike[str], flag: str, example: str) -> str:
    """Check that a file can be written at ``path`` (given with ``flag``); return it absolute.

    The file may exist (it is replaced) and its directories may be missing (they are made when
    the file is written), but ``path`` must not be a directory or a device, nothing on the way
    may be a file, and the nearest existing directory must take new files.

    Raises:
        OutputPathError: naming ``flag``, the path as given, the problem and the fix.
    """
    given = os.fspath(path)
    if given == "-" and flag != "--json":  # only the record goes to standard output
        raise OutputPathError(
            f"{flag} -: only --json takes '-' (standard output); {flag} writes a file",
            f"name a file, e.g. {flag} {example}",
        )
    target = Path(os.path.abspath(given))
    if target.is_dir() or given.endswith(("/", os.sep)):  # "out/" means a directory too
        raise OutputPathError(
            f"{flag} {given}: names a directory; {flag} takes a file name",
            f"name a file inside it, e.g. {flag} {os.path.join(given, example)}",
        )
    if target.exists() and not target.is_file():
        raise OutputPathError(
            f"{flag} {given}: is not a regular file (a device or a pipe), and would be replaced",
            f"name a new file, e.g. {flag} {example}",
        )
    _check_writable_dir(target.parent, given, flag)
    return str(target)


def check_output_dir(path: str | os.PathLike[str], flag: str, shown: str | None = None) -> str:
    """See :func:`_check_output_dir`; an OS refusal (a name too long, ...) is a bad path too."""
    return _os_errors_are_bad_paths(path, flag, lambda: _check_output_dir(path, flag, shown))


def _check_output_dir(path: str | os.PathLike[str], flag: str, shown: str | None) -> str:
    """Check that ``path`` (given with ``flag``) is, or can be made, a writable directory.

    ``shown`` is how the user wrote it, when ``path`` is a rewritten form of it (the local path of
    a ``file://`` URL); messages name it.

    Returns:
        ``path`` made absolute.

    Raises:
        OutputPathError: naming ``flag``, the path as given, the problem and the fix.
    """
    target = Path(os.path.abspath(path))
    given = shown if shown is not None else os.fspath(path)
    if target.exists() and not target.is_dir():
        raise OutputPathError(
            f"{flag} {given}: is a file; {flag} takes a directory",
            "name a new or existing directory, or move the file away",
        )
    _check_writable_dir(target, given, flag)
    return str(target)


def _check_writable_dir(directory: Path, given: str, flag: str) -> None:
    """Check that ``directory`` exists and takes new files, or that it can be made."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputPathError(
            f"{flag} {given}: {existing} is a file, so nothing can be made under it",
            "choose a path whose folders are folders (or move that file away)",
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=".torchdoctor-probe-", dir=existing)
    except OSError as exc:
        raise OutputPathError(
            f"{flag} {given}: cannot write in {existing} ({_reason(exc)})",
            "choose a directory you can write to (relative paths start from the current one)",
        ) from None
    os.close(fd)
    os.unlink(probe)


def _reason(exc: OSError) -> str:
    # /proc and /sys answer "no such file" for a file in a directory that exists: say what it means.
    if exc.errno == errno.ENOENT:
        return "it takes no new files"
    return exc.strerror or str(exc)


def _os_errors_are_bad_paths(path: str | os.PathLike[str], flag: str, check: Any) -> str:
    try:
        return check()
    except OSError as exc:  # ENAMETOOLONG, ELOOP, ...: the path, not torchdoctor, is at fault
        raise OutputPathError(
            f"{flag} {os.fspath(path)}: cannot be used ({exc.strerror or exc})",
            "choose another path (shorter names, no symlink loops)",
        ) from None


def existing_dir(given: str | os.PathLike[str], flag: str, hint: str) -> Path:
    """``given`` (a folder an option names, ``~`` expanded) with every symlink followed.

    Raises:
        TorchdoctorError: it is not an existing folder (``{flag} {given}: not a folder``).
    """
    path = Path(given).expanduser()
    if not path.is_dir():
        raise TorchdoctorError(f"{flag} {os.fspath(given)}: not a folder", hint)
    return Path(os.path.realpath(path))


def lies_under(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``folder`` or lies under it, every symlink on the way followed."""
    real, within = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return real == within or within in real.parents


def ignored_dir(top: Path, *parts: str) -> Path:
    """``top/parts...`` made (parents too), with a ``.gitignore`` of ``*`` in ``top`` so what
    torchdoctor keeps there (backups, an agent's records) stays out of the user's `git status`."""
    folder = top.joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    ignore = top / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    return folder


def resolve_script(script: str) -> Path:
    """The file ``python SCRIPT`` would run (a folder's ``__main__.py``), made absolute.

    Checked by the supervisor before it starts the script's process (no torch import here), and
    again by the runner in that process.

    Raises:
        TorchdoctorError: the script is missing, or a folder without ``__main__.py``.
    """
    path = Path(script)
    if not path.exists():
        raise TorchdoctorError(
            f"script not found: {script}",
            "check the path (it is relative to the current directory)",
        )
    if path.is_dir():
        main = path / "__main__.py"
        if not main.exists():
            raise TorchdoctorError(
                f"{script} is a directory without __main__.py", "pass the training script itself"
            )
        return main.resolve()
    return path.resolve()


# --- `--json -`: the record on standard output, everything else on standard error ----------
#
# For scripts, CI and agents that read the record from a pipe
# (``torchdoctor run --json - -- train.py | jq .verdict``). While the command runs, file descriptor 1 points at standard error, so the
# report, progress and whatever the script and its worker processes print (they inherit the
# descriptor) cannot mix with the record; the command writes its record to a file in a temporary
# folder as it would to any ``--json PATH`` (atomically, on every ending it writes one), and when
# it returns, or is interrupted, that file is copied to the real standard output.

#: The ``--json`` value that means standard output.
STDOUT = "-"
#: How the report names the record's place when it goes to standard output.
STDOUT_WORDS = "standard output"

#: The commands' attribute of ``--json`` (``run``, ``loader`` and ``fix`` keep it in their run
#: options' ``json_path``; ``compare`` and ``analyze`` in ``json``).
_ATTRIBUTES = ("json_path", "json")

_stand_in: str | None = None


def where(path: str) -> str:
    """``path`` as the report says it: the stand-in file of ``--json -`` is standard output."""
    return STDOUT_WORDS if _stand_in is not None and path == _stand_in else path


def asks_for_stdout(args: argparse.Namespace) -> str | None:
    """The attribute holding ``--json -`` in ``args``, if the command was given it."""
    for name in _ATTRIBUTES:
        if getattr(args, name, None) == STDOUT:
            return name
    return None


@contextmanager
def record_on_stdout(args: argparse.Namespace, attribute: str) -> Iterator[None]:
    """Run the command with its record going to standard output (see the module's words)."""
    global _stand_in
    folder = tempfile.mkdtemp(prefix="torchdoctor-stdout-")
    stand_in = os.path.join(folder, "record.json")
    setattr(args, attribute, stand_in)
    _stand_in = stand_in
    stdout = sys.stdout
    stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    # Python's own prints go to the stderr object too: the stdout object still believes in the
    # file it was opened on (a seekable file, when stdout was redirected to one), and would seek
    # on the pipe or terminal its descriptor now names.
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        _stand_in = None
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        sys.stdout = stdout
        os.dup2(saved, 1)
        os.close(saved)
        try:
            if os.path.exists(stand_in):
                with open(stand_in, "rb") as fh:
                    data = fh.read()
                _write_all(1, data)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
