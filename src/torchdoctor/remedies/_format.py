"""The on-disk layout of a torchdoctor cache (docs/remedies.md is its specification)."""

from __future__ import annotations

import re

import numpy as np

FORMAT_NAME = "torchdoctor-cache"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
INDEX = "index.bin"
#: little-endian int64, the only dtype of the index
INDEX_DTYPE = "<i8"
BUILD_DIR = "_build"

#: dtypes a field may have; anything else (objects, strings) is refused, so no pickle is needed
FIELD_DTYPES = {
    np.dtype(t).str: np.dtype(t)
    for t in (
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "uint32",
        "int32",
        "uint64",
        "int64",
        "float16",
        "float32",
        "float64",
    )
}

_FIELD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def shard_name(shard: int) -> str:
    """Base name of shard number ``shard``."""
    return f"shard-{shard:05d}"


def field_file(shard: int, field: str) -> str:
    """File holding field ``field`` of shard ``shard``: its samples' bytes, back to back."""
    return f"{shard_name(shard)}.{field}.bin"


def marker_file(shard: int) -> str:
    """The build-progress record of a finished shard (deleted when the cache is complete)."""
    return f"{BUILD_DIR}/{shard_name(shard)}.json"


def is_field_name(name: str) -> bool:
    """Whether ``name`` can name a field (it becomes part of a file name)."""
    return bool(_FIELD_NAME.match(name)) and not name.endswith(".bin")


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """The little-endian dtype a field of ``dtype`` is stored as."""
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
