"""Saving and loading records: one JSON serialiser for every dataclass in the record.

Types are rebuilt from the dataclasses' own annotations, so a new typed field needs no code here.
Older schemas are migrated on load (:func:`migrate_v1`, then :func:`migrate_v2`), so
``torchdoctor report`` keeps reading every record it ever wrote.
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

from ._judged import JUDGEMENTS, NO_CHANGE, judged_speedup

#: Bump on any incompatible change, and teach :func:`record_from_dict` to migrate the old one.
SCHEMA_VERSION = 3

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
    return write_text_atomic(path, json.dumps(data, indent=1, default=_json_default) + "\n")


def write_text_atomic(path: str | os.PathLike[str], text: str, mode: int | None = None) -> Path:
    """Write ``text`` (UTF-8, its line endings as they are) to ``path`` through a temp file and
    a rename; with ``mode`` (a file's permission bits to keep), that mode. A file name that is not
    UTF-8 (its bytes held as surrogates) is written as its escapes (``\\udcff``)."""
    return write_bytes_atomic(path, text.encode("utf-8", "backslashreplace"), mode)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` through a temp file and a rename (a source file in its own
    encoding, a diff of such files); with ``mode`` (permission bits to keep), that mode."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        # mkstemp makes the file 0600; the record is the user's, with the mode their umask gives
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells it."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _json_default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def build(tp: Any, value: Any, where: str = "", root: type | None = None) -> Any:
    """Rebuild a value of type ``tp`` from its JSON form (dataclasses, lists, dicts, Optionals).

    The value is checked against ``tp`` on the way, so a hand-edited or foreign file fails here
    with the field's path (``steps: expected an object, got 5``) instead of deep in a renderer
    with an ``AttributeError``. ``where`` is the path of ``value`` inside the record; ``root``
    the record's own class, which a part names to hold a whole one (``FixTrial.after``).

    Raises:
        RecordError: ``value`` does not have the shape of ``tp``.
    """
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if value is None:
        if _nullable(tp):
            return None
        raise _mismatch(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return build(args[0], value, where, root) if len(args) == 1 else value
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise _mismatch(tp, value, where)
        return value
    if origin is list:
        if not isinstance(value, list):
            raise _mismatch(tp, value, where)
        (item,) = typing.get_args(tp) or (Any,)
        return [build(item, v, f"{where}[{i}]", root) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _mismatch(tp, value, where)
        _, item = typing.get_args(tp) or (Any, Any)
        return {k: build(item, v, _join(where, k), root) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, where, root)
    if not _is_instance(tp, value):
        raise _mismatch(tp, value, where)
    return value


def _build_dataclass(tp: Any, value: Any, where: str, root: type | None) -> Any:
    if not isinstance(value, dict):
        raise _mismatch(tp, value, where)
    # A part may hold the whole it is part of (``FixTrial.after`` is a RunRecord) and name it
    # only for type checkers: its name resolves to the record being rebuilt.
    hints = typing.get_type_hints(tp, localns={root.__name__: root} if root else None)
    fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
    kwargs = {}
    for name, field in fields.items():
        has_default = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        null_for_default = value.get(name, 0) is None and has_default and not _nullable(hints[name])
        if name not in value or null_for_default:
            # A field left out (or null where its type has no null) takes its default: older
            # writers left fields out; the record's own defaults say what "not measured" is.
            if not has_default:
                raise RecordError(f"{_join(where, name)}: missing (a {tp.__name__} needs it)")
            continue
        kwargs[name] = build(hints[name], value[name], _join(where, name), root)
    try:
        return tp(**kwargs)
    except (TypeError, ValueError) as exc:  # a dataclass's own check (__post_init__)
        raise RecordError(f"{where or tp.__name__}: {exc}") from None


def _nullable(tp: Any) -> bool:
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _is_instance(tp: Any, value: Any) -> bool:
    """Whether a JSON scalar fits a scalar type; a whole number is a float, a bool no number."""
    if tp is bool:
        return isinstance(value, bool)
    if tp in (int, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True  # a type this loader does not know how to check is taken as written


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)


def _mismatch(tp: Any, value: Any, where: str) -> RecordError:
    return RecordError(f"{where or 'the record'}: expected {_expected(tp)}, got {_shown(value)}")


def _expected(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_expected(a) for a in args) + " or null"
    if origin is typing.Literal:
        known = [json.dumps(a) for a in typing.get_args(tp)]
        if len(known) > 8:
            return f"one of {len(known)} known values ({', '.join(known[:3])}, ...)"
        return "one of " + ", ".join(known)
    if origin is list:
        return "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "an object"
    names = {bool: "true or false", int: "a number", float: "a number", str: "a string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _shown(value: Any) -> str:
    """``value`` as the file spells it, short: ``5``, ``"abc"``, ``null``, ``a list``."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def record_from_dict(cls: type, data: Any) -> Any:
    """Rebuild a record of type ``cls`` from its JSON form, migrating older schemas."""
    if not isinstance(data, dict):
        raise RecordError(
            f"not a torchdoctor run record: the file holds {_shown(data)}, not a JSON object"
        )
    if "schema_version" not in data:
        raise RecordError("not a torchdoctor run record (no schema_version)")
    version = data["schema_version"]
    if version == 1:
        data, version = migrate_v1(data, _field_names(cls)), 2
    if version == 2:
        data, version = migrate_v2(data), 3
    if version != SCHEMA_VERSION:
        raise RecordError(
            f"record schema_version {version} is not supported by this torchdoctor "
            f"(it reads version {SCHEMA_VERSION}); re-run the diagnosis with this version"
        )
    return build(cls, data, root=cls)


def migrate_v1(data: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """A schema-1 record dict in the schema-2 layout (the v1 ``extra`` keys moved to typed fields).

    ``fields`` are the record class's field names: a v1 key whose field it lacks is dropped (and
    kept in ``extra`` for a class that still has one). ``fix.after`` (a whole record) is migrated
    the same way.
    """
    out = {k: v for k, v in data.items() if k != "extra"}
    if not isinstance(data.get("extra") or {}, dict):
        raise RecordError(f"extra: expected an object, got {_shown(data['extra'])}")
    extra = dict(data.get("extra") or {})
    for key, (name, inner) in _V1_EXTRA.items():
        if key not in extra or name not in fields:
            continue
        value = extra.pop(key)
        before = out.get(name) if isinstance(out.get(name), dict) else {}
        if inner is None:
            out[name] = {**before, **value} if isinstance(value, dict) else value
        else:
            out[name] = {**before, inner: value}
    fix = out.get("fix")
    if isinstance(fix, dict) and isinstance(fix.get("after"), dict):
        fix["after"] = migrate_v1(fix["after"], fields)
    if "extra" in fields:
        out["extra"] = extra
    out["schema_version"] = 2
    return out


def migrate_v2(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-2 record dict in the schema-3 layout: each speedup judged against the noise
    (a trial's, the ``--fix`` re-runs', the patch's and each remedy's) is one ``judged`` object
    (:class:`~torchdoctor.record.JudgedSpeedup`) instead of keys spelled apart in each.

    A trial's judgement was not saved (it was derived from its speedup, spread and allowance
    on each rendering): it is derived here by the same rule. ``fix.after`` (a whole record) is
    migrated the same way.
    """
    out = dict(data)
    trials = out.get("trials")
    if isinstance(trials, list):
        out["trials"] = [_trial_v3(t) if isinstance(t, dict) else t for t in trials]
    fix = out.get("fix")
    if isinstance(fix, dict):
        fix = out["fix"] = dict(fix)
        fix["verified"] = _judged_v3(
            fix, "verified_speedup", "verified_interval", fix.pop("allowance", None)
        )
        if isinstance(fix.get("after"), dict):
            fix["after"] = migrate_v2(fix["after"])
    patch = out.get("patch")
    if isinstance(patch, dict):
        patch = out["patch"] = dict(patch)
        patch["judged"] = _judged_v3(patch, "speedup", "interval", patch.pop("allowance", None))
        remedies = patch.get("remedies")
        if isinstance(remedies, list):
            patch["remedies"] = [_remedy_v3(r) if isinstance(r, dict) else r for r in remedies]
    out["schema_version"] = 3
    return out


def _remedy_v3(remedy: dict[str, Any]) -> dict[str, Any]:
    out = dict(remedy)
    out["judged"] = _judged_v3(out, "speedup", "interval", None)  # a remedy kept no allowance
    return out


def _trial_v3(trial: dict[str, Any]) -> dict[str, Any]:
    out = dict(trial)
    detail = out["detail"] = dict(out.get("detail") or {})
    allowance = detail.pop("allowance", 0.0)
    speedup, spread = out.pop("speedup", None), out.pop("spread", None) or []
    if speedup is None:
        out["judged"] = None
        return out
    low, high = spread if isinstance(spread, list) and len(spread) == 2 else (None, None)
    if allowance is None:
        allowance = 0.0  # as the report read a trial without one
    if not all(_number(x) for x in (speedup, allowance)) or not all(
        x is None or _number(x) for x in (low, high)
    ):  # not judged: build() says which field has the wrong type
        out["judged"] = {"speedup": speedup, "low": low, "high": high, "allowance": allowance}
        return out
    out["judged"] = dataclasses.asdict(judged_speedup(speedup, low, high, allowance))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _judged_v3(
    old: dict[str, Any], speedup_key: str, interval_key: str, allowance: Any
) -> dict[str, Any] | None:
    """The v2 keys of a judged speedup, taken out of ``old``, as a v3 ``judged`` object; a
    judgement that is no speedup's (``SAME LOSSES``, ``""``: not judged) is dropped."""
    speedup = old.pop(speedup_key, None)
    interval = old.pop(interval_key, None) or []
    judgement = old.pop("judgement", None)
    if speedup is None:
        return None
    low, high = interval if isinstance(interval, list) and len(interval) == 2 else (None, None)
    return {
        "speedup": speedup,
        "low": low,
        "high": high,
        "allowance": allowance,
        "judgement": judgement if judgement in JUDGEMENTS else NO_CHANGE,
    }


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def load_record(cls: type, path: str | os.PathLike[str]) -> Any:
    """Read a record file; every failure is a :class:`RecordError` naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecordError(f"{p}: no such file") from None
    except UnicodeDecodeError as exc:
        raise RecordError(
            f"{p}: not a text file (byte {exc.object[exc.start]:#04x} at offset {exc.start} "
            "is not UTF-8): a record is JSON text"
        ) from None
    except OSError as exc:
        raise RecordError(f"{p}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise RecordError(f"{p}: JSON nested too deeply to be a record") from None
    try:
        return record_from_dict(cls, data)
    except RecordError as exc:
        raise RecordError(f"{p}: {exc}") from None
