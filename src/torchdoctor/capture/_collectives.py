"""The script's own ``torch.distributed`` collectives, timed as communication
(docs/distributed.md, "Collectives called by hand").

DDP all-reduces gradients inside backward, from C++; the no-sync phase tells that time apart. A
script that synchronises by hand (``dist.all_reduce(p.grad)`` for each parameter, a barrier, a
broadcast of a metric) calls ``torch.distributed``'s Python functions from its own lines: each
such call is timed on the host clock, its time summed per measured step, and its line kept.
Calls made by torch's parallel code (FSDP2's all-gathers and reduce-scatters) are timed apart
(``capture._issued``); other calls made by torch itself (DDP's construction, Join's flags) and
torchdoctor's own group pass through untimed: only a call whose caller is the user's code counts
as the script's (one frame lookup more per call).

In the communication-free phase (``free``), the script's blocking all-reduce, reduce, broadcast
and barrier return at once: each rank keeps its own tensor, as under DDP's ``no_sync()`` (the
ranks drift apart; the run is stopped after the capture, as always). A step that calls another
collective (an all-gather, whose output the script reads) or an asynchronous one cannot be made
free: the phase is then skipped with a note.
"""

from __future__ import annotations

import functools
import sys
from time import perf_counter_ns
from typing import Any

from ..record import Finding, RunRecord, split_where
from ._frames import is_user_file
from ._issued import IssuedCollectives, issued_by_torch, timed_wait
from ._patch import Patcher

#: The collectives timed when the user's code calls them.
TIMED = (
    "all_reduce",
    "reduce",
    "broadcast",
    "barrier",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "all_gather_object",
    "broadcast_object_list",
)
#: Those that can return at once in the communication-free phase: each rank's tensor stays its
#: own, which is what the phase measures (no output the script reads is left unwritten).
FREEABLE = frozenset({"all_reduce", "reduce", "broadcast", "barrier"})


class CollectiveWatch:
    """Times the collectives the script calls itself; makes them free on request."""

    def __init__(self) -> None:
        #: The communication-free phase: freeable calls return at once.
        self.free = False
        self._step_ns = 0
        self._step_calls = 0
        #: Calls in the measured steps.
        self.measured_calls = 0
        #: Per measured step: ms in the script's collectives.
        self.step_ms: list[float] = []
        #: Calls timed, and those that could not be made free (their names).
        self.calls = 0
        self.not_freeable: set[str] = set()
        #: Where the script calls them: ``file:line`` -> (name, calls).
        self.sites: dict[str, list[Any]] = {}
        #: The collectives torch's own parallel code issues (FSDP2's), timed apart.
        self.issued = IssuedCollectives()
        self.last_step_ms = 0.0

    def install(self, patcher: Patcher) -> None:
        import torch.distributed as dist

        if not dist.is_available():
            return
        from torch.distributed import distributed_c10d as c10d

        for name in TIMED:
            original = getattr(c10d, name, None)
            if original is None:
                continue
            wrapped = self._wrap(name, original)
            patcher.set(c10d, name, wrapped)
            if getattr(dist, name, None) is original:
                patcher.set(dist, name, wrapped)
        work = getattr(c10d, "Work", None)
        if work is not None:  # an asynchronous FSDP2 call's time is where it is waited for
            patcher.set(work, "wait", timed_wait(self.issued, work.wait))

    def _wrap(self, name: str, original: Any) -> Any:
        freeable = name in FREEABLE

        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            filename = caller.f_code.co_filename
            if not is_user_file(filename):
                if issued_by_torch(filename):  # FSDP2's all-gathers, reduce-scatters...
                    return self.issued.call(name, original, args, kwargs)
                return original(*args, **kwargs)  # torch's other own calls, or torchdoctor's
            asynchronous = bool(kwargs.get("async_op"))
            if self.free:
                if freeable and not asynchronous:
                    return None
                self.not_freeable.add(f"{name}(async_op=True)" if asynchronous else name)
            start = perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                self._step_ns += perf_counter_ns() - start
                self.calls += 1
                self._step_calls += 1
                where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
                site = self.sites.setdefault(where, [name, 0])
                site[1] += 1
                if asynchronous or not freeable:
                    self.not_freeable.add(f"{name}(async_op=True)" if asynchronous else name)

        return collective

    def step_ended(self, measuring: bool) -> None:
        """A step ended: its collectives' time kept when the step is a measured one."""
        self.issued.step_ended(measuring)
        # most scripts call no collective of their own: no arithmetic then
        #: The step that just ended: ms in the script's own collectives (the no-sync phase's).
        self.last_step_ms = round(self._step_ns / 1e6, 4) if self._step_ns else 0.0
        if measuring:
            self.step_ms.append(self.last_step_ms)
            self.measured_calls += self._step_calls
        self._step_ns = self._step_calls = 0

    @property
    def freeable(self) -> bool:
        """The measured steps called collectives, and every one can be made free."""
        return self.calls > 0 and not self.not_freeable


#: Share of the step in the script's own collectives from which they are a finding.
FINDING_SHARE = 0.10


def manual_collectives_finding(watch: CollectiveWatch, record: RunRecord) -> Finding | None:
    """The script's own collectives, where they take a fair share of its measured step."""
    if not watch.step_ms or record.step_ms is None or record.step_ms.mean <= 0:
        return None
    per_step = sum(watch.step_ms) / len(watch.step_ms)
    if per_step < FINDING_SHARE * record.step_ms.mean:
        return None
    where, (name, calls) = max(watch.sites.items(), key=lambda kv: kv[1][1])
    calls = watch.measured_calls / len(watch.step_ms)
    file, line = split_where(where)
    title = (
        f"the script calls torch.distributed collectives itself: about {calls:.0f} per "
        f"step (most: {name} here), {per_step:.1f} ms of a {record.step_ms.mean:.1f} ms step, "
        "each waited for on the host and none overlapping backward"
    )
    fix = (
        "wrap the model in DistributedDataParallel(model), which all-reduces the gradients in "
        "buckets while backward still runs; by hand, flatten the gradients into one tensor and "
        "all_reduce it once per step (async_op=True, waited for before optimizer.step())"
    )
    return Finding(kind="ddp.manual-collectives", title=title, fix=fix, file=file, line=line,
                   cost_ms=round(per_step, 3), severity="warning")  # fmt: skip
