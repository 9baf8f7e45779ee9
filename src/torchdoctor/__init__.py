"""torchdoctor: find what bounds a PyTorch training run by measurement, and prove the fix.

The public API is re-exported here and imported lazily, so ``import torchdoctor`` does not
import torch until a name that needs it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name -> module that defines it
_EXPORTS = {
    "watch": "torchdoctor.runner",
    "RunRecord": "torchdoctor.record",
    "CacheError": "torchdoctor.remedies",
    "CachedDataset": "torchdoctor.remedies",
    "DevicePrefetcher": "torchdoctor.remedies",
    "ImageOptions": "torchdoctor.remedies",
    "Normalize": "torchdoctor.remedies",
    "build_cache": "torchdoctor.remedies",
    "cache_image_folder": "torchdoctor.remedies",
    "uint8_collate": "torchdoctor.remedies",
    "find_syncs": "torchdoctor.capture.syncs",
    "watch_syncs": "torchdoctor.capture.syncs",
    "SyncWatcher": "torchdoctor.capture.syncs",
    "analyze_trace": "torchdoctor.analysis.trace_analysis",
    "StepProfiler": "torchdoctor.capture.profiler",
    "diagnose_loader": "torchdoctor.loader",
    "clone_loader": "torchdoctor.loader",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'torchdoctor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
