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
    assert _intervals.merge_rows(starts, lengths, array("q", rows)) == expected
    assert len(expected) > 10  # the lengths make gaps as well as overlaps


def test_merging_no_rows_or_only_empty_ones_is_empty():
    assert _intervals.merge_rows(array("d", [1.0, 2.0]), array("d", [0.0, -1.0]), [0, 1]) == []
    assert _intervals.merge_rows(array("d"), array("d"), []) == []
