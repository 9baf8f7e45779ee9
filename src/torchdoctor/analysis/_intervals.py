"""Interval arithmetic shared by the trace analyses (plain lists, no numpy needed)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable


def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, non-overlapping union of ``(start, end)`` intervals; empty ones dropped."""
    ordered = sorted((s, e) for s, e in intervals if e > s)
    out: list[tuple[float, float]] = []
    for s, e in ordered:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def covered(merged: list[tuple[float, float]]) -> float:
    """Total length of already merged intervals."""
    return sum(e - s for s, e in merged)


def clip(
    merged: list[tuple[float, float]],
    start: float,
    end: float,
    ends: list[float] | None = None,
) -> list[tuple[float, float]]:
    """The parts of merged intervals inside ``[start, end)``.

    ``ends`` (the interval ends, in order) lets repeated calls skip to the window by bisection
    instead of scanning from the beginning.
    """
    first = bisect_right(ends, start) if ends is not None else 0
    out = []
    for k in range(first, len(merged)):
        s, e = merged[k]
        if e <= start:
            continue
        if s >= end:
            break
        out.append((max(s, start), min(e, end)))
    return out


def intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the overlap of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
