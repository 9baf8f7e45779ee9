"""The user's project: which files a patch may touch, and the unified diff of its changes.

A patch touches only the user's own files: those under the project's root (the git repository
that holds the script, else the script's folder), never an installed package. Paths in the diff
are relative to that root with git's ``a/`` and ``b/`` prefixes, so ``git apply`` and
``patch -p1`` take it from the root. Torch-free.
"""

from __future__ import annotations

import difflib
import subprocess
from collections.abc import Iterable
from pathlib import Path

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

    def diff(self, remedies: Iterable[str]) -> str:
        """The unified diff of ``remedies``' changes (empty when they change nothing)."""
        return "".join(
            file_diff(self.rel(path), self.files[path].text, text)
            for path, text in self.rendered(remedies).items()
        )


def file_diff(rel: str, before: str, after: str) -> str:
    """One file's unified diff, as ``git diff`` writes it (a last line without its newline is
    marked, so ``git apply`` and ``patch`` restore it exactly)."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{rel}",
        f"b/{rel}",
        n=3,
    )
    out = []
    for line in lines:
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)
