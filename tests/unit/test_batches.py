"""The one batch walker: every nesting the capture, the sync watcher, the loader doctor and the
prefetcher meet, and the limits that keep per-step callers cheap."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import torch

from torchdoctor._batches import batch_nbytes, map_tensors, path_text, tensor_ids, tensors_in, walk

Pair = namedtuple("Pair", "image label")


@dataclass
class Sample:
    pixels: torch.Tensor
    name: str


class Holder:
    def __init__(self, t):
        self.t = t


def _nested():
    a, b, c, d = (torch.ones(i + 1) for i in range(4))
    return {"x": [a, (b,)], "pair": Pair(c, 3), "sample": Sample(d, "n")}, (a, b, c, d)


def test_walk_yields_paths_in_batch_order():
    batch, (a, b, c, d) = _nested()
    found = walk(batch)
    assert [leaf for _, leaf in found] == [a, b, c, d]
    paths = [path_text("batch", p) for p, _ in found]
    assert paths == [
        "batch['x'][0]",
        "batch['x'][1][0]",
        "batch['pair'][0]",
        "batch['sample'].pixels",
    ]


def test_attribute_holders_only_when_asked():
    t = torch.ones(3)
    assert tensors_in(Holder(t)) == [t]
    assert tensors_in(Holder(t), attributes=False) == []
    assert walk(Holder(t), attributes=False) == []


def test_depth_and_limit_bound_the_walk():
    t = torch.ones(1)
    deep = [[[[t]]]]
    assert tensors_in(deep, depth=3) == []
    assert tensors_in(deep, depth=4) == [t]
    many = [torch.ones(1) for _ in range(10)]
    assert len(walk(many, limit=4)) == 4
    assert len(tensor_ids(many, limit=4)) == 4


def test_bytes_and_map_keep_structure():
    batch, _ = _nested()
    assert batch_nbytes(batch) == 4 * (1 + 2 + 3 + 4)
    doubled = map_tensors(batch, lambda t: t * 2)
    assert isinstance(doubled["pair"], Pair) and doubled["pair"].label == 3
    assert torch.equal(doubled["x"][1][0], torch.full((2,), 2.0))


def test_other_leaves_by_predicate():
    batch = {"a": [1, "s", 2.5], "b": (3,)}
    ints = walk(batch, lambda v: isinstance(v, int) and not isinstance(v, bool))
    assert [(path_text("b", p), v) for p, v in ints] == [("b['a'][0]", 1), ("b['b'][0]", 3)]
