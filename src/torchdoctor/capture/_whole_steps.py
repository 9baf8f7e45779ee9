"""A whole run's steps judged in blocks: the steady pace, the slow steps and where their excess
went, and the step-time series (part of :mod:`._whole`).

A block's steps are judged against its median: a step whose work is beyond
:data:`SLOW_FACTOR` times the median (and :data:`SLOW_MARGIN_NS` more) is slow, counts at the
median, and its excess is shared among what the stack samples of its stretch saw. Per step this
is one list append; a block is judged (a sort of its steps) every ``block_size`` steps, and the
series merges its blocks in pairs past :data:`MAX_BLOCKS` (the block then doubles), so a run of
days keeps bounded memory. Also the exactly timed costs' tally and the process's start.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .._devices import available
from ..record import SampledPlace, TimedCost, WholeBlock
from ._stacks import MAX_PLACES, add, fold

#: Steps judged together (and one point of the series, until blocks merge).
BLOCK = 32
MAX_BLOCKS = 256
#: A step is slow when its work exceeds its block's median by this factor and this margin.
SLOW_FACTOR = 1.5
SLOW_MARGIN_NS = 500_000
#: A place sampled in the steady steps at a tenth of its time in the slow ones, or more, is the
#: step's own code (a loss that is slow when the step is), not work between steps (a flush that
#: costs nothing in most steps and 200 ms in a few).
IN_STEP_RATIO = 10


class SteadySteps:
    """The judged steps of a whole run (see the module docstring)."""

    def __init__(self, t0_ns: int, event: Callable[[str, int, int], None]) -> None:
        self.t0_ns = t0_ns
        self._event = event
        #: ns at the steady pace, ns of slow steps' excess, and how many were slow.
        self.steady_total = 0
        self.slow_total = 0
        self.slow_count = 0
        #: Seconds the excess of slow steps went to: ``(file, line, fn, first)`` or ``("part",
        #: name)`` or ELSEWHERE / "unsampled"; and in how many slow stretches each was seen.
        self.excess: dict[tuple, float] = {}
        self.excess_gaps: dict[tuple, int] = {}
        #: Per place of the user's: sampled ns in steps at the steady pace and in slow steps'
        #: stretches (a place the steady steps run too is the step's own code, not between).
        self.steady_places: dict[tuple, int] = {}
        self.slow_places: dict[tuple, int] = {}
        self.steady_steps = 0
        self.blocks: list[list[Any]] = []  # [end_s, steps, median ms, rss MB]
        self.block_size = BLOCK
        self.pending: list[tuple[int, Any, int]] = []  # (work, its stretch's samples, end)

    def add(self, work: int, gap: dict[tuple, int] | None, end: int) -> None:
        self.pending.append((work, gap, end))
        if len(self.pending) >= self.block_size:
            self.judge(end)

    def pending_ns(self) -> int:
        return sum(p[0] for p in self.pending)

    def judge(self, now: int) -> None:
        """Judge the pending steps against their median; one point of the series."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        works = sorted(p[0] for p in pending)
        median = works[len(works) // 2]
        limit = max(median * SLOW_FACTOR, median + SLOW_MARGIN_NS)
        for work, gap, end in pending:
            if work <= limit:
                self.steady_total += work
                self.steady_steps += 1
                if gap:
                    add(self.steady_places, gap, places_only=True)
                continue
            if gap:
                add(self.slow_places, gap, places_only=True)
            self.steady_total += median
            excess = work - median
            self.slow_total += excess
            self.slow_count += 1
            between = self._attribute(excess, gap)
            self._event("between-steps" if between else "slow-steps", end - excess, end)
        self.blocks.append([(now - self.t0_ns) / 1e9, len(pending), median / 1e6, *_memory_mb()])
        if len(self.blocks) > MAX_BLOCKS:
            blocks = self.blocks
            merged = [_merged(a, b) for a, b in zip(blocks[::2], blocks[1::2])]
            self.blocks = merged + blocks[len(merged) * 2 :]  # an odd last one stays
            self.block_size *= 2

    def _attribute(self, excess: int, gap: dict[tuple, int] | None) -> bool:
        """Share a slow step's excess among what its stretch's samples saw; True when most of it
        went to the user's own functions (time between steps).

        A place of the user's gets the time it was sampled beyond what it takes in a steady step
        (a flush of 150 ms in a step of 50 ms gets its 150 ms, not three quarters of them); what
        is left goes to the rest by its samples. On a busy machine the step's own share of the
        stretch grows, and a share by samples alone undercounts the place."""
        if not gap:
            self.excess[("unsampled",)] = self.excess.get(("unsampled",), 0.0) + excess
            return False
        steady = self.steady_steps or 1
        beyond = {
            key: max(ns - self.steady_places.get(key, 0) / steady, 0.0)
            for key, ns in gap.items()
            if len(key) == 4
        }
        placed = sum(beyond.values())
        scale = min(1.0, excess / placed) if placed > 0 else 0.0
        shares = {key: ns * scale for key, ns in beyond.items() if ns > 0}
        rest = excess - sum(shares.values())
        others = {key: ns for key, ns in gap.items() if key not in shares}
        pool = others if sum(others.values()) > 0 else gap  # the rest is never lost
        seen = sum(pool.values())
        for key, ns in pool.items() if seen > 0 and rest > 0 else ():
            shares[key] = shares.get(key, 0.0) + rest * ns / seen
        for key, share in shares.items():
            self.excess[key] = self.excess.get(key, 0.0) + share
            self.excess_gaps[key] = self.excess_gaps.get(key, 0) + 1
        if len(self.excess) > MAX_PLACES:
            fold(self.excess)
        return sum(v for key, v in shares.items() if len(key) == 4) * 2 > excess

    def in_step(self) -> tuple[tuple, ...]:
        """Places the steady steps run as much as the slow ones: the step's own code (a loss,
        a helper that does the step), whose share of a slow step's excess is not between steps."""
        slow = self.slow_count
        if not slow or not self.steady_steps:
            return ()
        return tuple(
            key
            for key, ns in self.slow_places.items()
            if self.steady_places.get(key, 0) / self.steady_steps >= ns / slow / IN_STEP_RATIO
        )

    def excess_places(self) -> tuple[SampledPlace, ...]:
        """Where the slow steps' excess went, in seconds."""
        gaps = self.excess_gaps
        return tuple(SampledPlace(k, v / 1e9, gaps.get(k, 0)) for k, v in self.excess.items())

    def series(self) -> tuple[WholeBlock, ...]:
        return tuple(WholeBlock(*block) for block in self.blocks)


def _merged(a: list[Any], b: list[Any]) -> list[Any]:
    steps = a[1] + b[1]
    median = (a[2] * a[1] + b[2] * b[1]) / steps if steps else b[2]
    rss = max(x for x in (a[3], b[3]) if x is not None) if a[3] or b[3] else None
    return [b[0], steps, median, rss, b[4]]


def _memory_mb() -> tuple[float | None, float | None]:
    """The process's resident memory and the host's memory still available (MB)."""
    try:
        import psutil

        rss = psutil.Process().memory_info().rss / 2**20
        return round(rss, 1), round(available() / 2**20, 1)
    except Exception:  # noqa: BLE001 - memory is a detail of the series
        return None, None


class Tally:
    """One exactly timed cost as it adds up (the summary's :class:`~torchdoctor.record.TimedCost`)."""

    __slots__ = ("ns", "count", "where", "sampled_ns")

    def __init__(self) -> None:
        self.ns = 0
        self.count = 0
        #: The user's line of the first one (a checkpoint's: the line whose saves cost most).
        self.where: str | None = None
        #: What the stack samples saw around it (a save function's own work), in ``ns`` too.
        self.sampled_ns = 0

    def cost(self) -> TimedCost:
        return TimedCost(self.ns / 1e9, self.count, self.where, self.sampled_ns / 1e9)


def process_start_ns(clock_ns: Callable[[], int] = time.perf_counter_ns) -> int:
    """When this process started, on ``clock_ns``'s scale: its age, to 10 ms, from the kernel's
    clock ticks since boot (``/proc``; psutil's start time is wall-clock, to the second)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            ticks = int(fh.read().rpartition(b")")[2].split()[19])
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        age_s = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        try:
            import psutil

            age_s = time.time() - psutil.Process(os.getpid()).create_time()
        except Exception:  # noqa: BLE001 - no start time: the run counts from now
            age_s = 0.0
    return clock_ns() - int(max(age_s, 0.0) * 1e9)
