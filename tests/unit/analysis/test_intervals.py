"""Interval arithmetic of the trace analyses (``analysis._intervals``)."""

from __future__ import annotations

import random
from array import array

import pytest

from torchdoctor.analysis import _intervals


@pytest.mark.parametrize("shuffled", [False, True])
def test_merging_rows_is_merging_their_intervals(shuffled):
    rng = random.Random(7)
    starts = array("d", sorted(rng.uniform(0, 1000) for _ in range(400)))
    lengths = array("d", (rng.choice([0.0, -1.0, 0.5, 3.0, 40.0]) for _ in range(400)))
    rows = list(range(0, 400, 3))
    if shuffled:
        rng.shuffle(rows)
    expected = _intervals.merge((starts[i], starts[i] + lengths[i]) for i in rows)
    merged = _intervals.merge_rows(starts, lengths, array("q", rows))
    assert _pairs(merged) == expected
    assert len(expected) > 10  # the lengths make gaps as well as overlaps
    ends = array("d", (starts[i] + lengths[i] for i in range(400)))
    assert _pairs(_intervals.merge_ends(starts, ends, rows)) == expected
    assert _intervals.spans_covered(merged) == _intervals.covered(expected)


def _pairs(spans):
    starts, ends = spans
    assert starts.typecode == ends.typecode == "d"  # columns, not a list of tuples
    return list(zip(starts, ends, strict=True))


def test_merging_no_rows_or_only_empty_ones_is_empty():
    assert (
        _pairs(_intervals.merge_rows(array("d", [1.0, 2.0]), array("d", [0.0, -1.0]), [0, 1])) == []
    )
    assert _pairs(_intervals.merge_rows(array("d"), array("d"), [])) == []


def _brute_clip(merged, start, end):
    return [(max(s, start), min(e, end)) for s, e in merged if e > start and s < end]


def test_clipping_spans_to_a_window_keeps_what_lies_inside_it():
    rng = random.Random(3)
    merged = _intervals.merge(
        (x, x + rng.uniform(0.1, 9.0)) for x in (rng.uniform(0, 500) for _ in range(300))
    )
    spans = (array("d", (s for s, _ in merged)), array("d", (e for _, e in merged)))
    for _ in range(200):
        a = rng.uniform(-10, 510)
        b = a + rng.choice([0.0, 0.5, 5.0, 60.0, 600.0])
        assert _intervals.clip_spans(spans, a, b) == _brute_clip(merged, a, b)
    edge = merged[5]
    assert _intervals.clip_spans(spans, edge[1], edge[1] + 1e-9) == []  # an end is not inside
    assert _intervals.clip_spans(spans, edge[0] - 1.0, edge[0]) == []  # nor a start


def test_the_overlap_of_two_span_sets_is_the_length_both_cover():
    rng = random.Random(5)

    def spans():
        merged = _intervals.merge(
            (x, x + rng.uniform(0.5, 20.0)) for x in (rng.uniform(0, 300) for _ in range(60))
        )
        return merged, (array("d", (s for s, _ in merged)), array("d", (e for _, e in merged)))

    (a, a_spans), (b, b_spans) = spans(), spans()
    # the overlap on a fine grid: both covered
    grid = [k / 64 for k in range(0, 330 * 64)]
    inside = lambda m, x: any(s <= x < e for s, e in m)  # noqa: E731
    expected = sum(1 for x in grid if inside(a, x) and inside(b, x)) / 64
    assert abs(_intervals.intersection(a_spans, b_spans) - expected) < (len(a) + len(b)) / 32
    assert _intervals.intersection(a_spans, (array("d"), array("d"))) == 0.0
