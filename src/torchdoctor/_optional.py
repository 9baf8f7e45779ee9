"""The one place that knows which optional packages torchdoctor can use."""

from __future__ import annotations

import importlib
from types import ModuleType

from ._errors import TorchdoctorError

#: import name -> (pip package, torchdoctor extra that installs it)
OPTIONAL = {
    "PIL": ("pillow", "images"),
    "PIL.Image": ("pillow", "images"),
    "fsspec": ("fsspec", "cache"),
    "s3fs": ("s3fs", "s3"),
    "pynvml": ("nvidia-ml-py", "nvml"),
    "pytorch_lightning": ("pytorch-lightning", None),
    "lightning": ("lightning", None),
    "mcp": ("mcp", "mcp"),
}


class MissingDependency(TorchdoctorError):
    """An optional package is needed for what was asked."""


def is_available(name: str) -> bool:
    """Whether the optional module ``name`` can be imported."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def require(name: str, purpose: str) -> ModuleType:
    """Import optional module ``name`` or raise an error naming the ``pip install`` that fixes it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        package, extra = OPTIONAL.get(name, (name, None))
        how = f"pip install 'torchdoctor[{extra}]'" if extra else f"pip install {package}"
        raise MissingDependency(f"{purpose} needs the package {package!r}", how) from None
