"""Host-device syncs and per-step host-to-device copies: raw events -> findings.

Pure functions over the events that :class:`torchdoctor.capture.syncs.SyncWatcher` records
(anything with the attributes of ``SyncEvent``, or dicts with the same keys, e.g. loaded from a
run record). No torch import. The finding kinds are described in ``docs/syncs.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torchdoctor.record import Finding

from .sync_libraries import library_setting
from .sync_uses import NO_GRAD_FIX, no_grad_count, used_at_once, used_at_once_fix

#: An operation that makes the host wait for the device.
SYNC = "sync"
#: Host data copied to the device inside the step.
COPY = "copy"


@dataclass(frozen=True)
class SyncKind:
    """What a finding kind is called, which group it is in, and how to fix it."""

    group: str
    what: str
    fix: str


KINDS: dict[str, SyncKind] = {
    "item": SyncKind(
        SYNC,
        "`.item()` on a device tensor",
        "Keep the value on the device (e.g. `running += loss.detach()`) and read it with "
        "`.item()` only every k steps, when you log it.",
    ),
    "scalar-conversion": SyncKind(
        SYNC,
        "Python number from a device tensor (`float()`/`int()`/`bool()`/`torch.equal`)",
        "Keep the arithmetic in tensors (`torch.where`, `clamp`, masks) instead of turning a "
        "device value into a Python number inside the step; read it every k steps if you need it.",
    ),
    "tensor-branch": SyncKind(
        SYNC,
        "Python `if`/`while` on a device tensor",
        "Replace the branch with tensor ops (`torch.where(cond, a, b)`, `x * mask`), or decide "
        "from values the host already has (shapes, the step counter).",
    ),
    "tensor-assert": SyncKind(
        SYNC,
        "`assert` on a device tensor",
        "Move the check into the Dataset (check labels on the host before they are copied), run "
        "it once before training, or use `torch._assert_async(cond)`, which checks on the device "
        "without waiting.",
    ),
    "tolist": SyncKind(
        SYNC,
        "`.tolist()` of a device tensor",
        "Keep the values in tensors on the device (`preds.append(logits.argmax(1))`) and convert "
        "once per epoch (`torch.cat(preds).tolist()`), or every k steps for logging.",
    ),
    "to-host": SyncKind(
        SYNC,
        "copy of a device tensor to the host (`.cpu()`/`.numpy()`/`.to('cpu')`)",
        "Don't copy to the host inside the step: accumulate metrics on the device and copy them "
        "every k steps (or `.to('cpu', non_blocking=True)` into pinned memory, then read it later).",
    ),
    "print-tensor": SyncKind(
        SYNC,
        "printing or formatting a device tensor",
        "Print or log every k steps (`if step % 100 == 0: print(...)`): formatting a tensor "
        "copies it to the host and waits for the device. Accumulate on the device in between.",
    ),
    "nonzero": SyncKind(
        SYNC,
        "`nonzero`/`argwhere`/one-argument `torch.where` (output size depends on the data)",
        "Use a fixed-size form: `torch.where(cond, x, 0)`, multiply by the mask, or "
        "`x.nonzero_static(size=n)` when an upper bound is known.",
    ),
    "masked-select": SyncKind(
        SYNC,
        "`masked_select` (output size depends on the data)",
        "Keep the full shape: `torch.where(mask, x, 0)` or `x * mask`, then reduce (divide by "
        "`mask.sum()` for a mean) without selecting a data-dependent number of elements.",
    ),
    "boolean-mask-index": SyncKind(
        SYNC,
        "indexing with a boolean mask `x[mask]` (output size depends on the data)",
        "Read with `torch.where(mask, x, 0)` / `x.masked_fill(~mask, 0)` and write with "
        "`x.masked_fill_(mask, value)` or `torch.where`; both keep the shape fixed.",
    ),
    "unique": SyncKind(
        SYNC,
        "`unique` (output size depends on the data)",
        "Compute it once outside the loop or in the Dataset; for counts per class use a "
        "fixed-size `torch.zeros(n, device=d).index_add_(0, labels, ones)`.",
    ),
    "data-dependent-shape": SyncKind(
        SYNC,
        "an operation whose output size depends on tensor values",
        "Pass the output size when the operation accepts one (e.g. "
        "`repeat_interleave(..., output_size=n)`, `bincount(..., minlength=n)` with known "
        "bounds), or compute sizes on the host before the step.",
    ),
    "cuda-synchronize": SyncKind(
        SYNC,
        "a device synchronize (`torch.accelerator.synchronize()`, or the device's own such as "
        "CUDA's) in the step",
        "Remove the `synchronize()` call from the training step; it is only needed around "
        "timing code (torchdoctor times the steps for you).",
    ),
    "python-index": SyncKind(
        COPY,
        "indexing a device tensor with a Python `range`/list",
        "Index with a tensor made on the device: `torch.arange(n, device=x.device)` instead of "
        "`range(n)`; a fixed list of indices becomes a buffer built once (`register_buffer`).",
    ),
    "tensor-from-python-data": SyncKind(
        COPY,
        "tensor built from Python data (`torch.tensor([...])`/`torch.Tensor(list)`) in the step",
        "Keep the data as tensors on the device from the start (no Python lists in the step), "
        "or build it with a device factory (`torch.full/arange/zeros(..., device=...)`).",
    ),
    "host-tensor-to-device": SyncKind(
        COPY,
        "tensor made on the host in the step, then used on the device",
        "Create it where it is used: pass `device=x.device` to the factory (e.g. "
        "`torch.arange(n, device=x.device)`) instead of building it on the host and moving it.",
    ),
    "constant-rebuilt": SyncKind(
        COPY,
        "constant tensor rebuilt from Python data and copied to the device every step",
        "Build it once: in `__init__`, `self.register_buffer('weight', torch.tensor([...]))` so "
        "`model.to(device)` moves it once; for class weights use the fused built-in loss, "
        "`nn.CrossEntropyLoss(weight=...)`, created once.",
    ),
}

#: A measured stall of this much per step makes a finding critical: on the accelerator runs this
#: finder targets, steps take tens of milliseconds, so 1 ms per step is a few percent or more.
CRITICAL_COST_MS = 1.0


def sync_findings(events: Iterable[Any], steps: int, on_accelerator: bool) -> list[Finding]:
    """Group sync and copy events by site into findings, most costly first.

    Args:
        events: ``SyncEvent`` objects (or dicts with the same keys) from ``SyncWatcher``.
        steps: how many training steps the events were recorded over (at least 1).
        on_accelerator: True when the run used an accelerator; False for a CPU run, whose
            findings say what *would* block or copy on an accelerator.

    Returns:
        One finding per (kind, file, line, library site), most costly first (measured cost,
        then calls per step): a sync made inside a library is told once per place in the
        library and user's line that leads there. Python-data tensors built at least twice at
        one site with identical values become a single ``constant-rebuilt`` finding.
    """
    steps = max(1, int(steps))
    groups: dict[tuple[str, str | None, int | None, str | None], list[dict[str, Any]]] = {}
    for raw in events:
        event = _as_dict(raw)
        key = (event["kind"], event.get("file"), event.get("line"), event.get("via"))
        groups.setdefault(key, []).append(event)

    findings = [
        _finding(_final_kind(kind, group), group, steps, on_accelerator)
        for (kind, *_), group in groups.items()
    ]
    findings.sort(
        key=lambda f: (-(f.cost_ms or 0.0), -(f.calls_per_step or 0.0), f.file or "", f.line or 0)
    )
    return findings


def _as_dict(event: Any) -> dict[str, Any]:
    if isinstance(event, dict):
        return event
    return {
        name: getattr(event, name, None)
        for name in (
            "kind",
            "op",
            "file",
            "line",
            "source",
            "step",
            "duration_ns",
            "fingerprint",
            "via",
            "used_at",
            "via_source",
            "library",
            "library_calls",
            "grad",
            "used_by",
        )
    }


def _final_kind(kind: str, group: list[dict[str, Any]]) -> str:
    """A Python-data site rebuilt with the same values each time is a rebuilt constant."""
    if kind != "tensor-from-python-data" or len(group) < 2:
        return kind
    prints = {e.get("fingerprint") for e in group}
    if len(prints) == 1 and None not in prints:
        return "constant-rebuilt"
    return kind


def _finding(kind: str, group: list[dict[str, Any]], steps: int, on_accelerator: bool) -> Finding:
    info = KINDS.get(kind) or SyncKind(SYNC, kind, "Remove the host round trip from the step.")
    first = group[0]
    calls_per_step = len(group) / steps
    durations = [e["duration_ns"] for e in group if e.get("duration_ns") is not None]
    cost_ms = sum(durations) / steps / 1e6 if on_accelerator and durations else None
    if info.group == SYNC:
        effect = (
            "makes the host wait for the device"
            if on_accelerator
            else "would block on an accelerator"
        )
    else:
        effect = (
            "copies host data to the device inside the step"
            if on_accelerator
            else "would be a host-to-device copy on an accelerator"
        )
    library = first.get("library")
    where = f", inside {library}" if library else ""
    # a read made with grad off (an evaluation's) is counted in the window, not per step
    # ... and not in every watched step (a training metric read under no_grad each step is per
    # step, an evaluation's is not)
    no_grad = (
        info.group == SYNC
        and not library
        and all(e.get("grad") is False for e in group)
        and len({e.get("step") for e in group}) < steps
    )
    user = (
        (first.get("used_by") or used_at_once(first.get("source")))
        if info.group == SYNC and not library
        else None
    )
    count = (
        no_grad_count(len(group), steps) if no_grad and user is None else _per_step(calls_per_step)
    )
    title = f"{info.what} {effect}{where} ({count})"
    severity = "critical" if cost_ms is not None and cost_ms >= CRITICAL_COST_MS else "warning"
    detail: dict[str, Any] = {
        "group": info.group,
        "ops": sorted({e.get("op") or "?" for e in group}),
        "calls": len(group),
        "steps": steps,
        "on_accelerator": on_accelerator,
        "stall_measured": cost_ms is not None,
    }
    fix = info.fix
    if first.get("via"):
        detail["via"] = [first["via"]]
        detail["library"] = library
        detail["library_source"] = first.get("via_source")
        setting = library_setting(first.get("library_calls") or (), first.get("via_source"))
        if setting:
            detail["setting"] = setting
        fix = _library_fix(library, setting)
    if user is not None:
        detail["used_by"] = user
        fix = used_at_once_fix(user)
    elif no_grad:
        detail["grad"] = False
        fix = NO_GRAD_FIX
    used_at = sorted({e["used_at"] for e in group if e.get("used_at")})
    if used_at:
        detail["used_at"] = used_at
    return Finding(
        kind=kind,
        title=title,
        fix=fix,
        file=first.get("file"),
        line=first.get("line"),
        source=first.get("source"),
        calls_per_step=calls_per_step,
        cost_ms=cost_ms,
        severity=severity,
        detail=detail,
    )


def _library_fix(library: str | None, setting: str | None) -> str:
    """The fix of a sync made inside a library: its setting, where one is known."""
    if setting:
        return setting
    return (
        f"This runs inside {library or 'a library'}, reached from your line; torchdoctor knows "
        "no setting that controls it. Look for an option of that code path (logging, "
        "validation, progress display), or call into it less often."
    )


def _per_step(calls_per_step: float) -> str:
    if calls_per_step == int(calls_per_step):
        n = int(calls_per_step)
        return f"{n} time{'s' if n != 1 else ''} per step"
    return f"{calls_per_step:.2g} times per step"
