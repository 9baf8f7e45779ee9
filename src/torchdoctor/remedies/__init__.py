"""Drop-in remedies users import: the offline cache, uint8 batches, device prefetching, EMA."""

from __future__ import annotations

from ._build import build_cache, cache_image_folder
from ._collate import Normalize, uint8_collate
from ._dataset import CachedDataset, open_manifest
from ._ema import EMA
from ._prefetch import DevicePrefetcher
from ._sources import ImageOptions
from ._storage import CacheError

__all__ = [
    "CacheError",
    "CachedDataset",
    "DevicePrefetcher",
    "EMA",
    "ImageOptions",
    "Normalize",
    "build_cache",
    "cache_image_folder",
    "open_manifest",
    "uint8_collate",
]
