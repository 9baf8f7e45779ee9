"""Running a script with some of its files patched, without touching them (``torchdoctor fix``).

``torchdoctor fix`` measures each remedy on the patched code. The patched files lie in a
temporary folder; the run executes them *as* the originals: the script under its own path
(``__file__``, tracebacks and the record's ``file:line`` name the original) and each imported
module of the user's through an import hook that compiles the patched text for the original's
path. Relative paths in the script (its data next to it) resolve as they do in the real run.
Torch-free.
"""

from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import sys
import tokenize
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


def _source(patched: str) -> str:
    """The patched file's text, decoded as Python decodes a script: in the encoding its coding
    cookie or BOM names (``fix`` writes it in the user's file's own)."""
    with tokenize.open(patched) as fh:
        return fh.read()


def _remember(path: str, source: str) -> None:
    """Tracebacks and the record's source lines show the patched text for ``path``."""
    lines = source.splitlines(keepends=True)
    # mtime None: linecache.checkcache leaves the entry alone (the file on disk differs)
    linecache.cache[path] = (len(source), None, lines, path)


class _PatchedLoader(importlib.machinery.SourceFileLoader):
    """Loads a module of the user's from its patched text, under the original's path."""

    def __init__(self, fullname: str, path: str, patched: str) -> None:
        super().__init__(fullname, path)
        self._patched = patched

    def get_code(self, fullname: str) -> types.CodeType:
        source = _source(self._patched)
        _remember(self.path, source)
        return compile(source, self.path, "exec", dont_inherit=True)


class _PatchedFinder(importlib.abc.MetaPathFinder):
    def __init__(self, overrides: Mapping[str, str]) -> None:
        self._overrides = {os.path.realpath(k): v for k, v in overrides.items()}

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[override]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None:
            return None
        patched = self._overrides.get(os.path.realpath(spec.origin))
        if patched is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname,
            spec.origin,
            loader=_PatchedLoader(fullname, spec.origin, patched),
            submodule_search_locations=spec.submodule_search_locations,
        )


@contextmanager
def patched_imports(overrides: Mapping[str, str]) -> Iterator[None]:
    """While open, importing a module whose file is a key of ``overrides`` (original path →
    patched file) loads the patched text. Nothing is installed when ``overrides`` is empty."""
    if not overrides:
        yield
        return
    finder = _PatchedFinder(overrides)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)


def run_patched_script(path: Path, patched: str) -> None:
    """Run the text of ``patched`` as the script ``path``, as ``runpy.run_path`` runs a script
    (a fresh ``__main__`` module, put back afterwards)."""
    source = _source(patched)
    _remember(str(path), source)
    code = compile(source, str(path), "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=str(path),
        __cached__=None,
        __loader__=None,
        __package__="",
        __spec__=None,
        __builtins__=builtins,
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
