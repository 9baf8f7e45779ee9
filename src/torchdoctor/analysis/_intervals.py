"""Interval arithmetic shared by the trace analyses (lists and arrays, no numpy needed)."""

from __future__ import annotations

import math
from array import array
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


#: Merged intervals held as two columns, their starts and their ends (in order, disjoint): 16
#: bytes an interval, where a list of ``(start, end)`` tuples takes about 100.
Spans = tuple["array[float]", "array[float]"]


def _in_order(starts: Sequence[float], rows: Sequence[int]) -> Iterable[int]:
    """``rows`` in order of start: as they are when they already are (a trace's rows mostly
    are), else sorted."""
    last = -math.inf
    for i in rows:
        if starts[i] < last:
            return sorted(rows, key=starts.__getitem__)
        last = starts[i]
    return rows


def merge_rows(starts: Sequence[float], lengths: Sequence[float], rows: Sequence[int]) -> Spans:
    """:func:`merge` of the intervals ``starts[i], starts[i] + lengths[i]`` of ``rows``, as
    :data:`Spans`, without a list of them all."""
    return _merge(starts, lengths, rows, by_length=True)


def merge_ends(starts: Sequence[float], ends: Sequence[float], rows: Sequence[int]) -> Spans:
    """:func:`merge_rows` of intervals given by their ends (``starts[i], ends[i]``)."""
    return _merge(starts, ends, rows, by_length=False)


def _merge(
    starts: Sequence[float], other: Sequence[float], rows: Sequence[int], by_length: bool
) -> Spans:
    out_s, out_e = array("d"), array("d")
    begin = end = -math.inf  # the interval being grown; none yet
    for i in _in_order(starts, rows):
        s = starts[i]
        e = s + other[i] if by_length else other[i]
        if e <= s:
            continue
        if s <= end:
            if e > end:
                end = e
            continue
        if end > -math.inf:
            out_s.append(begin)
            out_e.append(end)
        begin, end = s, e
    if end > -math.inf:
        out_s.append(begin)
        out_e.append(end)
    return out_s, out_e


def spans_covered(spans: Spans) -> float:
    """Total length of :data:`Spans` (summed as :func:`covered` sums a merged list)."""
    return sum(e - s for s, e in zip(*spans, strict=True))


def clip_spans(spans: Spans, start: float, end: float) -> list[tuple[float, float]]:
    """The parts of :data:`Spans` inside ``[start, end)``, found by bisection on their ends."""
    starts, ends = spans
    out = []
    for k in range(bisect_right(ends, start), len(ends)):
        s, e = starts[k], ends[k]
        if s >= end:
            break
        out.append((max(s, start), min(e, end)))
    return out


def covered(merged: list[tuple[float, float]]) -> float:
    """Total length of already merged intervals."""
    return sum(e - s for s, e in merged)


def intersection(a: Spans, b: Spans) -> float:
    """Length of the overlap of two :data:`Spans`."""
    (a_s, a_e), (b_s, b_e) = a, b
    i = j = 0
    total = 0.0
    while i < len(a_e) and j < len(b_e):
        s = max(a_s[i], b_s[j])
        e = min(a_e[i], b_e[j])
        if e > s:
            total += e - s
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return total
