"""The user's project: which files a patch may touch, and the unified diff of its changes.

A patch touches only the user's own files: those under the project's root (the git repository
that holds the script, else the script's folder), never an installed package. Paths in the diff
are relative to that root with git's ``a/`` and ``b/`` prefixes, so ``git apply`` and
``patch -p1`` take it from the root. Torch-free.
"""

from __future__ import annotations

import difflib
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

import libcst as cst

from ._edits import PatchError, Skipped, SourceFile

#: Folder names that mark an installed package: never patched.
_INSTALLED = ("site-packages", "dist-packages")


def project_root(script: Path) -> Path:
    """The git repository holding ``script`` (its top folder), else the script's folder."""
    folder = script.resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return folder
    top = out.stdout.strip()
    return Path(top).resolve() if out.returncode == 0 and top else folder


class Project:
    """The files of one project the patch plans on, each read and parsed once."""

    def __init__(self, script: Path, root: Path | None = None) -> None:
        self.script = script.resolve()
        self.root = (root or project_root(self.script)).resolve()
        self.files: dict[Path, SourceFile] = {}

    def refuses(self, path: Path) -> str | None:
        """Why ``path`` may not be patched, or ``None`` when it may."""
        p = path.resolve()
        if any(part in _INSTALLED for part in p.parts):
            return f"{p} belongs to an installed package, not to your project"
        if not p.is_relative_to(self.root):
            return f"{p} is outside the project ({self.root})"
        if not p.is_file():
            return f"{p} does not exist"
        return None

    def patchable(self, path: Path, setting: str, skipped: list[Skipped]) -> SourceFile | None:
        """The parsed file, or ``None`` with the reason added to ``skipped`` (for ``setting``)
        when it may not be patched or cannot be parsed."""
        refused = self.refuses(path)
        if refused is not None:
            skipped.append(Skipped(setting, refused))
            return None
        try:
            return self.source(path)
        except PatchError as exc:
            skipped.append(Skipped(setting, str(exc)))
            return None

    def source(self, path: Path) -> SourceFile:
        """The parsed file (raises :class:`~._edits.PatchError` when it cannot be parsed)."""
        p = path.resolve()
        if p not in self.files:
            self.files[p] = SourceFile.read(p)
        return self.files[p]

    def rel(self, path: Path) -> str:
        return path.resolve().relative_to(self.root).as_posix()

    def rendered(self, remedies: Iterable[str]) -> dict[Path, str]:
        """The files ``remedies`` change, with their new text."""
        chosen = set(remedies)
        out = {}
        for path, source in sorted(self.files.items()):
            text = source.render(chosen)
            if text != source.text:
                out[path] = text
        return out

    def comment_notes(self, remedies: Iterable[str]) -> list[str]:
        """What the patch of ``remedies`` says of each comment it left out (:mod:`._comments`)."""
        chosen = set(remedies)
        notes = []
        for path, source in sorted(self.files.items()):
            for line, comment in source.rendered(chosen)[1]:
                notes.append(
                    f"{self.rel(path)}:{line}: the comment `{comment}` was written for the line "
                    "as it was; the patch leaves it out: say what the new line does"
                )
        return notes

    def patched(self, remedies: Iterable[str]) -> dict[Path, bytes]:
        """The files ``remedies`` change, as the bytes to write: each in its own encoding and
        line endings, every line the patch does not change as it was."""
        return {
            path: self.files[path].encoded(text) for path, text in self.rendered(remedies).items()
        }

    def diff(self, remedies: Iterable[str]) -> str:
        """The unified diff of ``remedies``' changes as text, for the record and the report
        (empty when they change nothing): each file's part read in its own encoding. The file
        to apply is :meth:`diff_bytes`."""
        return "".join(
            part.decode(_text_codec(self.files[path].encoding), errors="replace")
            for path, part in self._file_diffs(remedies).items()
        )

    def diff_bytes(self, remedies: Iterable[str]) -> bytes:
        """The unified diff of ``remedies``' changes as ``git diff`` writes it: each file's lines
        in its own encoding and with its own line endings, so ``git apply`` and ``patch -p1``
        take it whatever the files are (CRLF, a latin-1 coding cookie)."""
        return b"".join(self._file_diffs(remedies).values())

    def _file_diffs(self, remedies: Iterable[str]) -> dict[Path, bytes]:
        out = {}
        for path, text in self.rendered(remedies).items():
            source = self.files[path]
            out[path] = file_diff(self.rel(path), source.encoded(source.text), source.encoded(text))
        return out


def file_diff(rel: str, before: bytes, after: bytes) -> bytes:
    """One file's unified diff of its bytes, as ``git diff`` writes it: lines split at ``\n``
    only, each keeping what ends it (a CRLF file's lines keep their ``\r``), and a last line
    without its newline marked, so ``git apply`` and ``patch`` restore it exactly."""
    name = os.fsencode(rel)
    lines = difflib.diff_bytes(
        difflib.unified_diff, _lines(before), _lines(after), b"a/" + name, b"b/" + name, n=3
    )
    out = []
    for line in lines:
        if line.endswith(b"\n"):
            out.append(line)
        else:
            out.append(line + b"\n\\ No newline at end of file\n")
    return b"".join(out)


def _lines(data: bytes) -> list[bytes]:
    """``data``'s lines as git and patch see them: split after each ``\n``, nothing else (not
    at a lone ``\r`` or a form feed, as ``splitlines`` would)."""
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _text_codec(encoding: str) -> str:
    """The codec that shows a diff part of a file in ``encoding`` (a BOM is a character of the
    first line there, not a mark to strip from the part's start)."""
    return "utf-8" if encoding == "utf-8-sig" else encoding


def reads_of(
    project: Project, source: SourceFile, node_type: type, name: str, skip: set[int]
) -> list[str]:
    """``file:line`` of each other read of ``name`` (a Name, or an Attribute's last part)."""
    lines = set()
    for node in source.nodes(node_type):
        found = node.value if isinstance(node, cst.Name) else node.attr.value  # type: ignore[union-attr]
        if found == name and source.line_of(node) not in skip:
            lines.add(source.line_of(node))
    imports = {source.line_of(n) for n in source.nodes(cst.ImportFrom)}
    return [f"{project.rel(source.path)}:{n}" for n in sorted(lines - imports)]


def also_read(uses: list[str]) -> str:
    """The other places a changed value is read, said (the change reaches them too)."""
    if not uses:
        return ""
    shown = ", ".join(uses[:4]) + (f" and {len(uses) - 4} more" if len(uses) > 4 else "")
    return f"; also read at {shown}, which change too"
