"""The collectives torch's own parallel code issues, timed (docs/distributed.md, "Collectives
torch issues").

FSDP2 (``fully_shard``) all-gathers each unit's parameters before its forward (and again before
its backward when it resharded after forward), reduce-scatters the gradients after its backward,
and all-reduces them across replicas under HSDP; it calls ``torch.distributed``'s Python
functions to do so. Each such call whose caller is torch's parallel code (``fsdp``,
``_composable``, ``tensor``, ``pipelining`` under ``torch/distributed``) is timed by kind and
by the bytes of its largest buffer (the gathered or the unreduced one):

- a call that blocks (gloo, on the host) is timed whole: its time is communication the step
  waits for, **exposed**;
- a call that returns a work object (``async_op=True``) is timed where the step waits for it
  (``Work.wait``): the time between is overlapped with other work.

On an accelerator, NCCL's calls return once queued on their stream: the host's time in them is
then a lower bound of the communication, which the device's own timeline holds (``--trace``).
DTensor's redistributions go through functional collectives (C++ ops), not these functions:
they are not timed here.

DDP's gradient all-reduce runs in its C++ reducer and is measured by the no-sync phase instead.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import torch

from ._frames import _TORCH_DIR, _norm

#: The folders of torch's parallel code under ``torch/distributed`` whose collectives count.
ISSUERS = tuple(
    os.path.join(_TORCH_DIR or "", "distributed", part) + os.sep
    for part in ("fsdp", "_composable", "tensor", "pipelining")
)
#: The kinds the report names, by the function called.
KINDS = {
    "all_gather_single": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather": "all_gather",
    "_all_gather_base": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "all_to_all_single": "all_to_all",
    "all_to_all": "all_to_all",
}


@functools.lru_cache(maxsize=256)
def issued_by_torch(filename: str) -> bool:
    """Whether a caller's file is torch's parallel code (FSDP2 and its kin)."""
    return _norm(filename).startswith(ISSUERS) if _TORCH_DIR else False


@dataclass
class KindTally:
    """One kind of collective: calls, bytes of its largest buffer, and time exposed."""

    calls: int = 0
    bytes: int = 0
    ns: int = 0


@dataclass
class IssuedCollectives:
    """Per step, the time the step spent in the collectives torch's parallel code issued."""

    #: Per measured step: ms exposed in them.
    step_ms: list[float] = field(default_factory=list)
    #: Over the measured steps, by kind (``all_gather``, ``reduce_scatter``...).
    kinds: dict[str, KindTally] = field(default_factory=dict)
    _step_ns: int = 0
    _step: dict[str, KindTally] = field(default_factory=dict)
    #: Works of asynchronous calls not yet waited for: id -> kind.
    _pending: dict[int, str] = field(default_factory=dict)
    #: A call was seen (in warmup, say): every measured step from then on has its figure.
    _seen: bool = False

    def call(self, name: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Make the call, timed; a work it returns is timed where it is waited for."""
        kind = KINDS.get(name, name)
        self._seen = True
        tally = self._step.setdefault(kind, KindTally())
        tally.calls += 1
        tally.bytes += _largest_bytes(args, kwargs)
        start = perf_counter_ns()
        result = original(*args, **kwargs)
        if kwargs.get("async_op") and result is not None:
            self._pending[id(result)] = kind
            return result
        spent = perf_counter_ns() - start
        tally.ns += spent
        self._step_ns += spent
        return result

    def waited(self, work: Any, spent_ns: int) -> None:
        """A work's ``wait()`` returned after ``spent_ns``: exposed time, when it is one of ours."""
        kind = self._pending.pop(id(work), None)
        if kind is None:
            return
        self._step.setdefault(kind, KindTally()).ns += spent_ns
        self._step_ns += spent_ns

    def step_ended(self, measuring: bool) -> None:
        if not self._seen:
            return  # torch's parallel code issued nothing yet (a DDP job): nothing to reset
        if measuring:
            self.step_ms.append(round(self._step_ns / 1e6, 4))
            for kind, tally in self._step.items():
                total = self.kinds.setdefault(kind, KindTally())
                total.calls += tally.calls
                total.bytes += tally.bytes
                total.ns += tally.ns
        self._step_ns = 0
        self._step = {}

    def per_step(self) -> dict[str, dict[str, float]]:
        """Each kind's calls, bytes and ms per measured step (the record's figures)."""
        steps = len(self.step_ms)
        if not steps:
            return {}
        return {
            kind: {
                "calls": round(t.calls / steps, 2),
                "bytes": round(t.bytes / steps),
                "ms": round(t.ns / 1e6 / steps, 4),
            }
            for kind, t in sorted(self.kinds.items(), key=lambda kv: -kv[1].ns)
        }


def timed_wait(issued: IssuedCollectives, original: Any) -> Any:
    """``Work.wait`` that tells ``issued`` how long a wait on one of its works took."""

    def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
        if not issued._pending:
            return original(work, *args, **kwargs)
        start = perf_counter_ns()
        try:
            return original(work, *args, **kwargs)
        finally:
            issued.waited(work, perf_counter_ns() - start)

    return wait


def _largest_bytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    sizes = [
        t.numel() * t.element_size()
        for t in (*args, *kwargs.values())
        if isinstance(t, torch.Tensor)
    ]
    return max(sizes, default=0)
