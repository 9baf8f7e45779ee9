"""The run record: plain dataclasses that hold every measured number, saved as JSON.

A record is produced once (by ``torchdoctor run``, ``watch()`` or ``analyze``) and rendered
many times (``torchdoctor report PATH``). Nothing here imports torch. The JSON layout is
documented in ``docs/record.md``; bump :data:`SCHEMA_VERSION` on any incompatible change.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

#: The parts of a step, in the order they are shown. They sum to ``step_ms``.
STEP_PARTS = ("data_wait", "to_device", "forward", "backward", "optimizer", "other")


@dataclass
class Stat:
    """Summary of a series of durations in milliseconds."""

    median: float
    p90: float
    mean: float
    min: float
    max: float
    count: int

    @classmethod
    def of(cls, values: list[float]) -> Stat | None:
        """Summarise ``values``; ``None`` when there are none."""
        if not values:
            return None
        ordered = sorted(values)
        return cls(
            median=_quantile(ordered, 0.5),
            p90=_quantile(ordered, 0.9),
            mean=sum(ordered) / len(ordered),
            min=ordered[0],
            max=ordered[-1],
            count=len(ordered),
        )


def _quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list."""
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class StepSeries:
    """Per-step durations in milliseconds, one list entry per measured step."""

    step_ms: list[float] = field(default_factory=list)
    data_wait_ms: list[float] = field(default_factory=list)
    to_device_ms: list[float] = field(default_factory=list)
    forward_ms: list[float] = field(default_factory=list)
    backward_ms: list[float] = field(default_factory=list)
    optimizer_ms: list[float] = field(default_factory=list)
    other_ms: list[float] = field(default_factory=list)
    #: DataLoader batches drawn during each step (more than 1 with gradient accumulation).
    batches: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.step_ms)

    def part(self, name: str) -> list[float]:
        """The series of one step part, by its name in :data:`STEP_PARTS`."""
        return getattr(self, f"{name}_ms")


@dataclass
class Verdict:
    """What bounds the run, in the user's words."""

    kind: str  # INPUT-BOUND | COMPUTE-BOUND | HOST-BOUND | COMMUNICATION-BOUND | UNKNOWN
    why: str
    next: str
    #: Share of the median step spent in each group: input, compute, host.
    shares: dict[str, float] = field(default_factory=dict)


@dataclass
class Finding:
    """One problem found in the run, with where it is and how to fix it."""

    kind: str
    title: str
    fix: str
    file: str | None = None
    line: int | None = None
    source: str | None = None
    calls_per_step: float | None = None
    #: Estimated or measured cost per step, when known.
    cost_ms: float | None = None
    severity: str = "warning"  # info | warning | critical
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoaderSettings:
    """The captured DataLoader's settings."""

    dataset: str
    dataset_len: int | None
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    drop_last: bool
    sampler: str
    collate_fn: str
    iterable: bool = False
    #: Where the script builds the DataLoader (``file:line``), when seen.
    created_at: str | None = None


@dataclass
class Environment:
    """Where the run happened."""

    torch_version: str
    python_version: str
    platform: str
    device: str
    device_name: str
    clock: str
    torch_threads: int
    cpu_logical: int
    cpu_physical: int | None
    world_size: int = 1
    rank: int = 0


@dataclass
class SystemUsage:
    """System utilisation sampled during the measured steps."""

    interval_s: float
    samples: int
    cpu_percent_per_core: list[float]
    cpu_percent_total: float
    main_rss_mb_max: float
    workers: int
    workers_rss_mb_max: float
    #: Per-sample totals, for plotting.
    timeline_s: list[float] = field(default_factory=list)
    main_rss_mb: list[float] = field(default_factory=list)
    workers_rss_mb: list[float] = field(default_factory=list)
    gpu_util_pct: float | None = None
    gpu_mem_mb_max: float | None = None


@dataclass
class LoaderAlone:
    """The captured DataLoader iterated without the model."""

    batches: int
    seconds: float
    batches_per_s: float
    #: Batches per second the model consumes when data is free (from the model-alone phase).
    needed_batches_per_s: float | None
    first_batch_ms: float | None = None


@dataclass
class RunRecord:
    """Everything one diagnosis measured. Serialised to JSON by :meth:`save`."""

    schema_version: int = SCHEMA_VERSION
    tool_version: str = ""
    created_at: str = ""
    command: list[str] = field(default_factory=list)
    #: complete | partial | interrupted | script-error | no-training
    status: str = "complete"
    notes: list[str] = field(default_factory=list)
    env: Environment | None = None
    loader: LoaderSettings | None = None
    warmup_steps: int = 0
    requested_steps: int = 0
    steps: StepSeries = field(default_factory=StepSeries)
    step_ms: Stat | None = None
    parts_ms: dict[str, Stat] = field(default_factory=dict)
    model_alone: list[float] = field(default_factory=list)
    model_alone_step_ms: Stat | None = None
    loader_alone: LoaderAlone | None = None
    ceiling_speedup: float | None = None
    verdict: Verdict | None = None
    findings: list[Finding] = field(default_factory=list)
    system: SystemUsage | None = None
    #: What the capture saw: counts of loaders, optimizers, steps, module calls.
    seen: dict[str, Any] = field(default_factory=dict)
    #: Measurement overheads that were excluded from the step timings, in ms.
    overhead_ms: dict[str, float] = field(default_factory=dict)
    #: Results of further analyses and trials (worker sweep, fix run, trace, ...).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def measured_steps(self) -> int:
        return len(self.steps)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, including derived ``measured_steps``."""
        out = dataclasses.asdict(self)
        out["measured_steps"] = self.measured_steps
        return out

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the record as JSON atomically (temp file, then rename)."""
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """Rebuild a record from :meth:`to_dict` output.

        Raises:
            RecordError: when ``data`` is not a torchdoctor record of a known schema.
        """
        if not isinstance(data, dict) or "schema_version" not in data:
            raise RecordError("not a torchdoctor run record (no schema_version)")
        version = data["schema_version"]
        if version != SCHEMA_VERSION:
            raise RecordError(
                f"record schema_version {version} is not supported by this torchdoctor "
                f"(it reads version {SCHEMA_VERSION}); re-run the diagnosis with this version"
            )
        return _build(cls, data)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        """Read a record saved by :meth:`save`.

        Raises:
            RecordError: when the file is missing, not JSON, or not a record.
        """
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
            return cls.from_dict(data)
        except RecordError as exc:
            raise RecordError(f"{p}: {exc}") from None


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


def _build(tp: Any, value: Any) -> Any:
    """Rebuild a value of type ``tp`` from its JSON form (dataclasses, lists, dicts, Optionals)."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(args[0], value) if len(args) == 1 else value
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [_build(item, v) for v in value]
    if origin is dict:
        _, item = typing.get_args(tp) or (Any, Any)
        return {k: _build(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        kwargs = {k: _build(hints[k], v) for k, v in value.items() if k in names}
        return tp(**kwargs)
    return value
