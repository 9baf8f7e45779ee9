"""What a cache is built from: an image folder or a ``module:callable`` dataset, as numpy fields."""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .._optional import require
from ._format import FIELD_DTYPES, is_field_name, storage_dtype
from ._storage import CacheError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm")
RESIZE_MODES = ("crop", "squash", "shorter")
COLOR_MODES = ("RGB", "L")


@dataclass(frozen=True)
class ImageOptions:
    """The deterministic image preprocessing done once, at build time.

    Attributes:
        size: target size in pixels, or None to keep every image's own size.
        resize: ``crop`` (shorter side to ``size``, then a centred ``size``x``size`` crop),
            ``squash`` (straight to ``size``x``size``, aspect ratio not kept) or ``shorter``
            (shorter side to ``size``, aspect kept, so images differ in shape).
        mode: ``RGB`` (3 channels) or ``L`` (grey, 1 channel).
        encoded: keep each image file's encoded bytes instead of decoded pixels (image folders
            only): several times smaller, so a large dataset still fits in RAM, but every read
            decodes (seed 000 tip 1). Cannot be combined with ``size``.
    """

    size: int | None = None
    resize: str = "crop"
    mode: str = "RGB"
    encoded: bool = False

    def __post_init__(self) -> None:
        if self.size is not None and self.size < 1:
            raise CacheError(f"image size must be at least 1 pixel, not {self.size}")
        if self.resize not in RESIZE_MODES:
            raise CacheError(f"unknown resize {self.resize!r}", f"use one of {RESIZE_MODES}")
        if self.mode not in COLOR_MODES:
            raise CacheError(f"unknown colour mode {self.mode!r}", f"use one of {COLOR_MODES}")
        if self.encoded and self.size is not None:
            raise CacheError(
                "an encoded cache keeps the image files' bytes as they are, so it cannot resize",
                "drop --size (resize on read), or drop --encoded to store resized pixels",
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for the manifest."""
        return asdict(self)


def decode_image(data: bytes, options: ImageOptions) -> np.ndarray:
    """Decode encoded image bytes into a uint8 HWC array, resized as ``options`` say."""
    image_mod = require("PIL.Image", "decoding images")
    with image_mod.open(io.BytesIO(data)) as img:
        return preprocess_pil(img, options)


def preprocess_pil(img: Any, options: ImageOptions) -> np.ndarray:
    """Colour-convert and resize one PIL image into a uint8 HWC array."""
    image_mod = require("PIL.Image", "decoding images")
    size = options.size
    if size is not None:
        width, height = img.size
        target = _target_size(width, height, size, options.resize)
        if getattr(img, "format", None) == "JPEG":
            # JPEG can decode at 1/2, 1/4 or 1/8 scale straight from the DCT; draft() picks the
            # smallest that is still at least the target, so far fewer pixels are decoded.
            img.draft(options.mode, target)
    img = img.convert(options.mode)
    if size is not None:
        target = _target_size(img.size[0], img.size[1], size, options.resize)
        if img.size != target:
            img = img.resize(target, image_mod.Resampling.BILINEAR)
        if options.resize == "crop" and img.size != (size, size):
            left = (img.size[0] - size) // 2
            top = (img.size[1] - size) // 2
            img = img.crop((left, top, left + size, top + size))
    array = np.asarray(img, dtype=np.uint8)
    if array.ndim == 2:
        array = array[:, :, None]
    return np.ascontiguousarray(array)


def _target_size(width: int, height: int, size: int, resize: str) -> tuple[int, int]:
    if resize == "squash":
        return (size, size)
    scale = size / min(width, height)
    return (max(size, round(width * scale)), max(size, round(height * scale)))


def to_fields(sample: Any, options: ImageOptions) -> dict[str, np.ndarray]:
    """One dataset sample as named numpy arrays.

    A dict keeps its keys; an ``(image, label)`` pair becomes fields ``image`` and ``label``;
    other tuples become ``0``, ``1``, ...; a single value becomes ``0``.
    """
    if isinstance(sample, dict):
        items = [(str(k), v) for k, v in sample.items()]
    elif isinstance(sample, (tuple, list)):
        if len(sample) == 2 and _looks_like_image(sample[0]) and _looks_like_label(sample[1]):
            items = [("image", sample[0]), ("label", sample[1])]
        else:
            items = [(str(i), v) for i, v in enumerate(sample)]
    else:
        items = [("image" if _looks_like_image(sample) else "0", sample)]
    fields = {}
    for name, value in items:
        if not is_field_name(name):
            raise CacheError(
                f"field name {name!r} cannot be stored",
                "use letters, digits and _ . - (at most 64 characters)",
            )
        fields[name] = to_array(name, value, options)
    return fields


def to_array(name: str, value: Any, options: ImageOptions) -> np.ndarray:
    """Convert one field value to a contiguous little-endian numpy array of a storable dtype."""
    if _is_pil(value):
        return preprocess_pil(value, options)
    if type(value).__module__.startswith("torch") and hasattr(value, "numpy"):
        value = value.detach().cpu().numpy()
    if isinstance(value, (bytes, bytearray, memoryview)):
        array = np.frombuffer(bytes(value), dtype=np.uint8)
    elif isinstance(value, bool):
        array = np.asarray(value, dtype=np.bool_)
    elif isinstance(value, int):
        array = np.asarray(value, dtype=np.int64)
    elif isinstance(value, float):
        array = np.asarray(value, dtype=np.float64)
    elif isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
    elif isinstance(value, str):
        raise CacheError(
            f"field {name!r} holds text, which the cache does not store",
            "tokenise it to integer ids (a uint16/int32 array) in the dataset, then build",
        )
    else:
        raise CacheError(
            f"field {name!r} holds a {type(value).__name__}, which the cache cannot store",
            "return numpy arrays, tensors, PIL images, ints, floats or bytes from the dataset",
        )
    dtype = storage_dtype(array.dtype)
    if dtype.str not in FIELD_DTYPES:
        raise CacheError(
            f"field {name!r} has dtype {array.dtype}, which the cache does not store",
            "use bool, (u)int8/16/32/64 or float16/32/64",
        )
    # np.require, not np.ascontiguousarray, which turns a 0-d scalar into shape (1,)
    return np.require(array.astype(dtype, copy=False), requirements="C")


def _is_pil(value: Any) -> bool:
    return type(value).__module__.startswith("PIL.") and hasattr(value, "convert")


def _looks_like_image(value: Any) -> bool:
    if _is_pil(value):
        return True
    shape = getattr(value, "shape", None)
    return (
        shape is not None
        and len(shape) in (2, 3)
        and str(getattr(value, "dtype", ""))
        in (
            "uint8",
            "torch.uint8",
        )
    )


def _looks_like_label(value: Any) -> bool:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return True
    shape = getattr(value, "shape", None)
    return shape is not None and tuple(shape) == () and "int" in str(getattr(value, "dtype", ""))


# --- sources -------------------------------------------------------------------------------


class Source:
    """A sequence of samples with a fingerprint; subclasses read an image folder or a dataset."""

    kind = "?"

    def __len__(self) -> int:
        raise NotImplementedError

    def fields(self, index: int) -> dict[str, np.ndarray]:
        """Sample ``index`` as named numpy arrays."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What the manifest records about the source (including its fingerprint)."""
        raise NotImplementedError

    def job_spec(self, start: int, stop: int) -> dict[str, Any]:
        """A small, picklable description from which a worker process reopens samples start:stop."""
        raise NotImplementedError


class ImageFolderSource(Source):
    """``root/class_name/*.jpg|png``: labels are class indices in sorted class-name order."""

    kind = "image_folder"

    def __init__(
        self,
        url: str,
        options: ImageOptions,
        storage_options: dict[str, Any] | None = None,
        listing: tuple[list[str], list[int], list[str], str] | None = None,
    ) -> None:
        fsspec = require("fsspec", "reading an image folder")
        self.url = url
        self.options = options
        self.storage_options = dict(storage_options or {})
        self.fs, root = fsspec.core.url_to_fs(url, **self.storage_options)
        self.root = root.rstrip("/")
        if listing is None:
            listing = self._scan()
        self.files, self.labels, self.classes, self.fingerprint = listing

    def _scan(self) -> tuple[list[str], list[int], list[str], str]:
        if not self.fs.isdir(self.root):
            raise CacheError(
                f"no image folder at {self.url}",
                "pass a folder laid out as class_name/*.jpg, or module:callable",
            )
        found = self.fs.find(self.root, detail=True)
        prefix = self.root + "/"
        entries = []
        for path, info in found.items():
            rel = path[len(prefix) :] if path.startswith(prefix) else path
            parts = rel.split("/")
            if len(parts) != 2 or parts[0].startswith(".") or parts[1].startswith("."):
                continue
            if not parts[1].lower().endswith(IMAGE_SUFFIXES):
                continue
            stamp = info.get("mtime") or info.get("LastModified") or info.get("ETag") or ""
            entries.append((rel, int(info.get("size") or 0), str(stamp)))
        entries.sort()
        if not entries:
            raise CacheError(
                f"no images found under {self.url}",
                f"lay images out as {self.url}/class_name/name.jpg ({', '.join(IMAGE_SUFFIXES)})",
            )
        classes = sorted({rel.split("/")[0] for rel, _, _ in entries})
        class_index = {name: i for i, name in enumerate(classes)}
        files = [rel for rel, _, _ in entries]
        labels = [class_index[rel.split("/")[0]] for rel in files]
        digest = hashlib.sha256(json.dumps(entries).encode())
        return files, labels, classes, digest.hexdigest()

    def __len__(self) -> int:
        return len(self.files)

    def fields(self, index: int) -> dict[str, np.ndarray]:
        data = self.fs.cat_file(f"{self.root}/{self.files[index]}")
        label = np.asarray(self.labels[index], dtype=np.int64)
        if self.options.encoded:
            return {"encoded": np.frombuffer(data, dtype=np.uint8), "label": label}
        try:
            image = decode_image(data, self.options)
        except CacheError:
            raise
        except Exception as exc:  # PIL raises many types for a damaged file
            raise CacheError(
                f"cannot decode image {self.files[index]}: {exc}",
                "remove or replace the damaged file, then build again (finished shards are kept)",
            ) from None
        return {"image": image, "label": label}

    def describe(self) -> dict[str, Any]:
        counts = np.bincount(np.asarray(self.labels), minlength=len(self.classes))
        return {
            "kind": self.kind,
            "url": self.url,
            "fingerprint": self.fingerprint,
            "classes": self.classes,
            "class_counts": [int(c) for c in counts],
        }

    def job_spec(self, start: int, stop: int) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "url": self.url,
            "storage_options": self.storage_options,
            "files": self.files[start:stop],
            "labels": self.labels[start:stop],
            "offset": start,
        }


class CallableSource(Source):
    """``module:callable`` (or a callable object) returning a map-style Dataset."""

    kind = "callable"

    def __init__(self, spec: str | Callable[[], Any], options: ImageOptions) -> None:
        self.options = options
        if callable(spec):
            self.spec = f"{spec.__module__}:{spec.__qualname__}"
            self.dataset = spec()
        else:
            self.spec = spec
            self.dataset = load_callable(spec)()
        try:
            self._len = len(self.dataset)
        except TypeError:
            raise CacheError(
                f"{self.spec} returned a {type(self.dataset).__name__} without len()",
                "return a map-style Dataset (with __len__ and __getitem__)",
            ) from None
        if self._len == 0:
            raise CacheError(f"{self.spec} returned an empty dataset")
        self.fingerprint = self._fingerprint()

    def _fingerprint(self) -> str:
        digest = hashlib.sha256(f"{self.spec}\n{self._len}\n".encode())
        for index in sorted({0, self._len // 2, self._len - 1}):
            for name, array in self.fields(index).items():
                digest.update(f"{index}:{name}:{array.dtype.str}:{array.shape}".encode())
                digest.update(memoryview(array).cast("B"))
        return digest.hexdigest()

    def __len__(self) -> int:
        return self._len

    def fields(self, index: int) -> dict[str, np.ndarray]:
        return to_fields(self.dataset[index], self.options)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "callable": self.spec, "fingerprint": self.fingerprint}

    def job_spec(self, start: int, stop: int) -> dict[str, Any]:
        return {"kind": self.kind, "spec": self.spec, "offset": 0}


def load_callable(spec: str) -> Callable[[], Any]:
    """Import ``module:callable`` (the current directory is importable, as with ``python -m``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CacheError(f"{spec!r} is not module:callable", "for example mypkg.data:make_dataset")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CacheError(f"cannot import {module_name!r}: {exc}", "check the module path") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CacheError(f"{module_name} has no attribute {attr!r}") from None
    if not callable(obj):
        raise CacheError(f"{spec} is not callable")
    return obj


def open_source(
    source: str | Callable[[], Any],
    options: ImageOptions,
    storage_options: dict[str, Any] | None = None,
) -> Source:
    """Open SOURCE: a callable object, ``module:callable``, or an image folder path/URL."""
    if callable(source):
        return CallableSource(source, options)
    text = str(source)
    if _is_callable_spec(text):
        return CallableSource(text, options)
    return ImageFolderSource(text, options, storage_options)


def _is_callable_spec(text: str) -> bool:
    if "://" in text or ":" not in text:
        return False
    module_name, _, attr = text.partition(":")
    return all(p.isidentifier() for p in module_name.split(".")) and all(
        p.isidentifier() for p in attr.split(".")
    )


#: datasets opened in this (worker) process, by spec, so a factory runs once per process
_OPEN_SOURCES: dict[str, Source] = {}


def remember_source(source: Source) -> None:
    """Let forked build workers use ``source`` as it is instead of calling its factory again."""
    if isinstance(source, CallableSource):
        _OPEN_SOURCES[source.spec] = source


def reopen(spec: dict[str, Any], options: ImageOptions) -> tuple[Source, int]:
    """Rebuild a source in a worker from :meth:`Source.job_spec`; returns it and its index offset."""
    if spec["kind"] == ImageFolderSource.kind:
        source = ImageFolderSource(
            spec["url"],
            options,
            spec["storage_options"],
            listing=(spec["files"], spec["labels"], [], ""),
        )
        return source, spec["offset"]
    key = spec["spec"]
    if key not in _OPEN_SOURCES:
        _OPEN_SOURCES[key] = CallableSource(key, options)
    return _OPEN_SOURCES[key], 0
