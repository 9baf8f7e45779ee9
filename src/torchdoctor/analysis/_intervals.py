"""Interval arithmetic shared by the trace analyses (plain lists, no numpy needed)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence


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


def merge_rows(
    starts: Sequence[float], lengths: Sequence[float], rows: Sequence[int]
) -> list[tuple[float, float]]:
    """:func:`merge` of the intervals ``starts[i], starts[i] + lengths[i]`` of ``rows``, without
    a list of them all: the rows are walked in order of start (sorted only when they are not
    already, as a trace's rows mostly are)."""
    ordered: Iterable[int] = rows
    last = -math.inf
    for i in rows:
        if starts[i] < last:
            ordered = sorted(rows, key=starts.__getitem__)
            break
        last = starts[i]
    out: list[tuple[float, float]] = []
    begin = end = -math.inf  # the interval being grown; none yet
    for i in ordered:
        s = starts[i]
        e = s + lengths[i]
        if e <= s:
            continue
        if s <= end:
            end = max(end, e)
            continue
        if end > -math.inf:
            out.append((begin, end))
        begin, end = s, e
    if end > -math.inf:
        out.append((begin, end))
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
