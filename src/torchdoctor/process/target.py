"""What ``torchdoctor run`` runs: a script or a module, with its arguments. Torch-free."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import TorchdoctorError
from .._paths import resolve_script


@dataclass
class Target:
    """A script path or a module name, with the arguments it receives as ``sys.argv[1:]``."""

    script: str | None = None
    module: str | None = None
    argv: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        head = [self.script] if self.script else ["-m", self.module or ""]
        return [*head, *self.argv]


def resolve_target(target: Target) -> Path:
    if target.script:
        return resolve_script(target.script)
    spec = _find_module(target.module or "")
    if spec is None or spec.origin is None:
        raise TorchdoctorError(
            f"module not found: {target.module}",
            "run from the directory that contains it, or install its package",
        )
    return Path(spec.origin).resolve()


def _find_module(name: str) -> Any:
    """The spec ``python -m name`` runs: searched from the current folder first, and a package's
    ``__main__`` (namespace packages too)."""
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{name}.__main__")
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path.remove(os.getcwd())
    return spec
