"""torchdoctor: find what bounds a PyTorch training run by measurement, and prove the fix.

The public API is re-exported here. Type checkers read the imports under ``TYPE_CHECKING``
(the package ships ``py.typed``); at run time each name is imported on first use, so
``import torchdoctor`` does not import torch until a name that needs it is used. Each name is
taken from its package's door (``torchdoctor.loader``, never ``torchdoctor.loader._x``).
``tests/unit/test_layout.py`` checks that ``__all__``, the ``TYPE_CHECKING`` imports and the
lazy table below name the same objects.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .analysis import analyze_trace
    from .capture import StepProfiler, SyncWatcher, find_syncs, watch_syncs
    from .loader import clone_loader, diagnose_loader
    from .process.inprocess import watch
    from .record import RunRecord
    from .remedies import (
        EMA,
        CachedDataset,
        CacheError,
        DevicePrefetcher,
        ImageOptions,
        Normalize,
        build_cache,
        cache_image_folder,
        uint8_collate,
    )

__all__ = [
    "CacheError",
    "CachedDataset",
    "DevicePrefetcher",
    "EMA",
    "ImageOptions",
    "Normalize",
    "RunRecord",
    "StepProfiler",
    "SyncWatcher",
    "__version__",
    "analyze_trace",
    "build_cache",
    "cache_image_folder",
    "clone_loader",
    "diagnose_loader",
    "find_syncs",
    "uint8_collate",
    "watch",
    "watch_syncs",
]

#: public name -> module it is imported from on first use (the same as under TYPE_CHECKING)
_EXPORTS = {
    "watch": "torchdoctor.process.inprocess",
    "RunRecord": "torchdoctor.record",
    "CacheError": "torchdoctor.remedies",
    "CachedDataset": "torchdoctor.remedies",
    "DevicePrefetcher": "torchdoctor.remedies",
    "EMA": "torchdoctor.remedies",
    "ImageOptions": "torchdoctor.remedies",
    "Normalize": "torchdoctor.remedies",
    "build_cache": "torchdoctor.remedies",
    "cache_image_folder": "torchdoctor.remedies",
    "uint8_collate": "torchdoctor.remedies",
    "find_syncs": "torchdoctor.capture",
    "watch_syncs": "torchdoctor.capture",
    "SyncWatcher": "torchdoctor.capture",
    "analyze_trace": "torchdoctor.analysis",
    "StepProfiler": "torchdoctor.capture",
    "diagnose_loader": "torchdoctor.loader",
    "clone_loader": "torchdoctor.loader",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'torchdoctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
