"""Where the time to make one batch goes: each transform, the loading around them, the collate.

Pure: the measuring side (:mod:`._transforms`) times a Dataset's transforms or profiles its
``__getitem__``, and these functions turn the timings into shares of the time to make one batch
(``batch_size`` samples plus one collate), the record's ``loader_report.transforms`` list.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Mapping, Sequence
from typing import Any

from ..record import Finding, TransformCost

#: A cost taking at least this share of the time to make a batch is reported as a finding.
COSTLY_SHARE = 0.25

#: Functions listed from a profile of ``__getitem__``; the rest is summed as "other".
TOP_FUNCTIONS = 6

#: Name of the time spent in ``__getitem__`` outside every transform (reading, decoding).
OUTSIDE_TRANSFORMS = "loading/decoding (outside transforms)"

#: Name of the time spent in the DataLoader's ``collate_fn``.
COLLATE = "collate_fn"

# pstats keys: (filename, line, function name); callers map caller key -> (cc, nc, tt, ct).
FuncKey = tuple[str, int, str]


def transform_costs(
    transform_ms_per_sample: Sequence[tuple[str, float, float]],
    getitem_ms_per_sample: float,
    batch_size: int,
    collate_ms: float | None,
) -> list[TransformCost]:
    """Shares from timed transforms.

    Args:
        transform_ms_per_sample: ``(name, ms per sample, calls per sample)`` for each transform.
        getitem_ms_per_sample: mean time of one ``__getitem__``, transforms included.
        batch_size: samples per batch (1 without automatic batching).
        collate_ms: time of one ``collate_fn`` call on a batch, when measured.

    Returns:
        Entries in the transforms' order, then the time outside them, then collate.
    """
    parts = [
        (name, ms * batch_size, "transform", calls) for name, ms, calls in transform_ms_per_sample
    ]
    inside = sum(ms for _, ms, _ in transform_ms_per_sample)
    outside = max(0.0, getitem_ms_per_sample - inside)
    parts.append((OUTSIDE_TRANSFORMS, outside * batch_size, "outside", 1.0))
    if collate_ms is not None:
        parts.append((COLLATE, collate_ms, "collate", None))
    return _with_shares(parts)


def profile_costs(
    stats: Mapping[FuncKey, tuple[Any, ...]],
    root: FuncKey,
    getitem_ms_per_sample: float,
    samples: int,
    batch_size: int,
    collate_ms: float | None,
    top: int = TOP_FUNCTIONS,
    names: Mapping[FuncKey, str] | None = None,
) -> list[TransformCost]:
    """Shares from a cProfile of ``__getitem__`` calls (``pstats.Stats(...).stats``).

    A callee in a library (torch, an installed package, the standard library) is named by what
    it reaches in the user's code or a known transform (``nn.Module.__call__`` -> ``Blur``); one
    that reaches neither keeps its name, marked as the library's, with kind ``library``.

    The breakdown lists what the dataset's ``__getitem__`` calls directly, descending through
    ``__getitem__`` wrappers (``Subset``, a user's wrapper) to the innermost one, so the names
    are the user's functions (``decode``, ``resize``), not the library calls inside them. The
    profile's proportions are scaled to ``getitem_ms_per_sample`` measured without the profiler.

    Args:
        stats: ``pstats.Stats(profile).stats``.
        root: key of the function the profile ran (it calls ``dataset[i]`` for each sample).
        getitem_ms_per_sample: mean unprofiled time of one ``__getitem__``.
        samples: how many ``__getitem__`` calls the profile covers.
        batch_size: samples per batch.
        collate_ms: time of one ``collate_fn`` call, when measured.
        top: functions listed; the rest are summed as "other".
        names: profile keys of the dataset's transforms' methods -> their class names.
    """
    callees = _callees(stats)
    node = root
    total = _cumtime(stats, root)
    for _ in range(8):  # descend through wrappers: root -> Subset.__getitem__ -> __getitem__
        kids = callees.get(node, {})
        if not kids:
            break
        kid, kid_s = max(kids.items(), key=lambda kv: kv[1])
        if not _is_item_access(kid) or kid_s < 0.5 * _cumtime(stats, node):
            break
        node = kid
    if node == root:
        node_s = total
    else:
        node_s = _cumtime(stats, node)
    per_sample_ms = getitem_ms_per_sample
    parts: list[tuple[str, float, str, float | None]] = []
    if node != root and is_library_file(node[0]):
        # The dataset's __getitem__ is a library's own (TensorDataset's indexing): no transform
        # of the user's runs, so its inside is not broken down nor advised on.
        parts.append(
            (f"{function_name(node)}, {_library_of(node[0])}'s own dataset code",
             per_sample_ms * batch_size, "dataset-library", 1.0)
        )  # fmt: skip
        if collate_ms is not None:
            parts.append((COLLATE, collate_ms, "collate", None))
        return _with_shares(parts)
    if node_s <= 0:  # no profile (another profiler was active): the total only
        parts.append(("__getitem__", per_sample_ms * batch_size, "other", 1.0))
    kids = sorted(callees.get(node, {}).items(), key=lambda kv: -kv[1])
    listed = 0.0
    merged: dict[tuple[str, str], list[float]] = {}
    for key, seconds in kids[:top]:
        calls = _edge_calls(stats, key, node)
        name, kind = _attributed(key, callees, names or {})
        entry = merged.setdefault((name, kind), [0.0, 0.0])
        entry[0] += seconds
        entry[1] += calls
        listed += seconds
    for (name, kind), (seconds, calls) in merged.items():
        share = seconds / node_s if node_s > 0 else 0.0
        parts.append((name, share * per_sample_ms * batch_size, kind, calls / max(1, samples)))
    rest = max(0.0, node_s - listed)
    if rest > 0 and node_s > 0:
        name = "other" if len(kids) > top else f"{function_name(node)} (own code)"
        parts.append((name, rest / node_s * per_sample_ms * batch_size, "other", None))
    if collate_ms is not None:
        parts.append((COLLATE, collate_ms, "collate", None))
    return _with_shares(parts)


def function_name(key: FuncKey) -> str:
    """A readable name of a pstats function key: ``decode (data.py:12)`` or ``time.sleep``."""
    filename, line, name = key
    if filename == "~" and line == 0:  # a builtin: "<built-in method time.sleep>"
        text = name.strip("<>")
        for prefix in ("built-in method ", "method "):
            if text.startswith(prefix):
                return text[len(prefix) :]
        return text
    return f"{name} ({os.path.basename(filename)}:{line})"


def _attributed(
    key: FuncKey, callees: Mapping[FuncKey, Mapping[FuncKey, float]], names: Mapping[FuncKey, str]
) -> tuple[str, str]:
    """``(name, kind)`` of a direct callee of ``__getitem__``: its transform's class, the user's
    function it reaches through library frames, or the library function itself."""
    if key in names:
        return names[key], "transform"
    if not is_library_file(key[0]):
        return function_name(key), "function"
    node = key
    for _ in range(8):  # follow the costliest callee through library frames
        kids = callees.get(node, {})
        if not kids:
            break
        node = max(kids.items(), key=lambda kv: kv[1])[0]
        if node in names:
            return names[node], "transform"
        if node[0] != "~" and not is_library_file(node[0]):
            return function_name(node), "function"
    return f"{function_name(key)}, in {_library_of(key[0])}", "library"


_STDLIB = tuple(
    os.path.realpath(p) for k in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(k))
)


def is_library_file(filename: str) -> bool:
    """torch, an installed package or the standard library: code the user does not edit."""
    if filename == "~":
        return False  # builtins are named as they are (time.sleep)
    path = os.path.realpath(filename)
    parts = path.split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts or path.startswith(_STDLIB)


def _library_of(filename: str) -> str:
    parts = os.path.realpath(filename).split(os.sep)
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return parts[parts.index(marker) + 1].removesuffix(".py")
    return "the standard library"


def transform_findings(costs: Sequence[TransformCost]) -> list[Finding]:
    """A finding for the costliest part when it takes :data:`COSTLY_SHARE` or more of a batch."""
    if not costs:
        return []
    worst = max(costs, key=lambda c: c.share)
    if worst.share < COSTLY_SHARE or worst.kind == "dataset-library":
        return []  # a library's own dataset (TensorDataset) has no transform to change
    table = [{"name": c.name, "share": round(c.share, 4), "kind": c.kind} for c in costs]
    title = f"{worst.name} takes {100 * worst.share:.0f}% of the time to make a batch"
    if worst.kind == "collate":
        fix = (
            "# collate_fn is the cost: return tensors from __getitem__ and let the default\n"
            "# collate stack them, or do the per-batch work on the device after .to(device)\n"
            "from torch.utils.data import default_collate\n"
            "DataLoader(..., collate_fn=default_collate)"
        )
    elif worst.kind == "library":
        fix = (
            f"# {worst.name.split(',')[0]} is library code that __getitem__ calls directly, not a\n"
            "# transform of yours: find the call in __getitem__ that reaches it (a per-sample\n"
            "# seed or generator, a file open) and do it once per worker (worker_init_fn) or\n"
            "# once per dataset instead of once per sample"
        )
    elif worst.kind == "outside":
        fix = (
            "# reading/decoding each sample is the cost: decode once and keep the samples in RAM\n"
            "from torchdoctor import CachedDataset\n"
            "dataset = CachedDataset(dataset)"
        )
    else:
        fix = (
            f"# {worst.name} runs on the CPU for every sample, every epoch. Either do it once\n"
            "# offline (a deterministic resize/convert/tokenize: store its output), or remove it\n"
            "# from the Dataset and apply it to the whole batch on the device:\n"
            "x = x.to(device, non_blocking=True)\n"
            f"x = batch_transform(x)  # the {worst.name} step, on a batched device tensor"
        )
    return [
        Finding(
            kind="loader.costly_transform",
            title=title,
            fix=fix,
            cost_ms=worst.ms_per_batch,
            severity="warning" if worst.share >= 0.5 else "info",
            detail={
                "name": worst.name,
                "share": worst.share,
                "kind": worst.kind,
                "transforms": table,
            },
        )
    ]


def _with_shares(parts: Sequence[tuple[str, float, str, float | None]]) -> list[TransformCost]:
    total = sum(ms for _, ms, _, _ in parts)
    return [
        TransformCost(
            name=name,
            share=ms / total if total > 0 else 0.0,
            ms_per_batch=ms,
            kind=kind,
            calls_per_sample=calls,
        )
        for name, ms, kind, calls in parts
    ]


def _callees(stats: Mapping[FuncKey, tuple[Any, ...]]) -> dict[FuncKey, dict[FuncKey, float]]:
    """caller -> {callee: cumulative seconds of the callee under that caller}."""
    out: dict[FuncKey, dict[FuncKey, float]] = {}
    for callee, entry in stats.items():
        callers = entry[4]
        for caller, edge in callers.items():
            out.setdefault(caller, {})[callee] = float(edge[3])
    return out


def _edge_calls(stats: Mapping[FuncKey, tuple[Any, ...]], callee: FuncKey, caller: FuncKey) -> int:
    edge = stats[callee][4].get(caller)
    return int(edge[1]) if edge else 0


def _cumtime(stats: Mapping[FuncKey, tuple[Any, ...]], key: FuncKey) -> float:
    entry = stats.get(key)
    return float(entry[3]) if entry else 0.0


def _is_item_access(key: FuncKey) -> bool:
    return key[2] in ("__getitem__", "__getitems__")


__all__ = [
    "COLLATE",
    "COSTLY_SHARE",
    "OUTSIDE_TRANSFORMS",
    "function_name",
    "profile_costs",
    "transform_costs",
    "transform_findings",
]
