"""Saving and loading records: one JSON serialiser for every dataclass in the record.

Types are rebuilt from the dataclasses' own annotations, so a new typed field needs no code here.
Older schemas are migrated on load (:func:`migrate_v1`), so ``torchdoctor report`` keeps reading
every record it ever wrote.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

#: Bump on any incompatible change, and teach :func:`record_from_dict` to migrate the old one.
SCHEMA_VERSION = 2

#: Schema 1 kept loader, trace and fix results in ``extra``, a dict read by string keys; schema 2
#: gives each a typed field. Where each v1 ``extra`` key goes: (field, key inside it or None).
_V1_EXTRA: dict[str, tuple[str, str | None]] = {
    "trace": ("trace", None),
    "trace_files": ("trace", "recorded_files"),
    "worker_sweep": ("loader_report", "worker_sweep"),
    "transforms": ("loader_report", "transforms"),
    "loader_memory": ("loader_report", "memory"),
    "copy_on_read": ("loader_report", "copy_on_read"),
    "worker_memory": ("loader_report", "worker_memory"),
    "loader_doctor_s": ("loader_report", "seconds"),
    "fix": ("fix", None),
    "loader_overrides": ("loader_overrides", None),
    "sync_sampled_steps": ("sync_sampled_steps", None),
}


class RecordError(ValueError):
    """A saved record could not be read."""


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` through a temp file and a rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, default=_json_default)
            fh.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _json_default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def build(tp: Any, value: Any) -> Any:
    """Rebuild a value of type ``tp`` from its JSON form (dataclasses, lists, dicts, Optionals)."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return build(args[0], value) if len(args) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [build(item, v) for v in value]
    if origin is dict:
        _, item = typing.get_args(tp) or (Any, Any)
        return {k: build(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        kwargs = {k: build(hints[k], v) for k, v in value.items() if k in names}
        return tp(**kwargs)
    return value


def record_from_dict(cls: type, data: Any) -> Any:
    """Rebuild a record of type ``cls`` from its JSON form, migrating older schemas."""
    if not isinstance(data, dict) or "schema_version" not in data:
        raise RecordError("not a torchdoctor run record (no schema_version)")
    version = data["schema_version"]
    if version == 1:
        data, version = migrate_v1(data, _field_names(cls)), SCHEMA_VERSION
    if version != SCHEMA_VERSION:
        raise RecordError(
            f"record schema_version {version} is not supported by this torchdoctor "
            f"(it reads version {SCHEMA_VERSION}); re-run the diagnosis with this version"
        )
    return build(cls, data)


def migrate_v1(data: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """A schema-1 record dict in the schema-2 layout (the v1 ``extra`` keys moved to typed fields).

    ``fields`` are the record class's field names: a v1 key whose field it lacks is dropped (and
    kept in ``extra`` for a class that still has one). ``fix.after`` (a whole record) is migrated
    the same way.
    """
    out = {k: v for k, v in data.items() if k != "extra"}
    extra = dict(data.get("extra") or {})
    for key, (name, inner) in _V1_EXTRA.items():
        if key not in extra or name not in fields:
            continue
        value = extra.pop(key)
        if inner is None:
            out[name] = {**(out.get(name) or {}), **value} if isinstance(value, dict) else value
        else:
            out[name] = {**(out.get(name) or {}), inner: value}
    fix = out.get("fix")
    if isinstance(fix, dict) and isinstance(fix.get("after"), dict):
        fix["after"] = migrate_v1(fix["after"], fields)
        fix["after"]["schema_version"] = SCHEMA_VERSION
    if "extra" in fields:
        out["extra"] = extra
    out["schema_version"] = SCHEMA_VERSION
    return out


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def load_record(cls: type, path: str | os.PathLike[str]) -> Any:
    """Read a record file; every failure is a :class:`RecordError` naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(f"{p}: no such file") from None
    except OSError as exc:
        raise RecordError(f"{p}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        return record_from_dict(cls, data)
    except RecordError as exc:
        raise RecordError(f"{p}: {exc}") from None
