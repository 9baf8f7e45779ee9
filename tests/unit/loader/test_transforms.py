"""Per-transform costs of Dataset.__getitem__, the profile fallback, and collate time."""

from __future__ import annotations

import random
import sys
import time

import pytest
import torch

# A user's own Compose, the same shape as torchvision's and albumentations'.
from slow_transform import Compose  # noqa: E402
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from torchdoctor.loader import (
    COLLATE,
    OUTSIDE_TRANSFORMS,
    find_transform_pipelines,
    function_name,
    is_compose_like,
    measure_getitem_costs,
    transform_costs,
    transform_findings,
)
from torchdoctor.record import TransformCost


class Scale:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class SlowBlur:
    """The costly transform: 30 ms per sample."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.030)
        return x + 1


class RandomFlip:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(0) if random.random() < 0.5 else x


def to_float(x: torch.Tensor) -> torch.Tensor:
    return x.float()


class Images(Dataset):
    def __init__(self, n: int = 20, transform=None) -> None:
        self.n = n
        self.transform = transform

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        x = torch.arange(16, dtype=torch.uint8) + i
        return self.transform(x) if self.transform else x


def pipeline():
    return Compose([to_float, RandomFlip(), SlowBlur(), Scale(0.5)])


def test_cost_in_one_transform_is_attributed_to_it():
    transform = pipeline()
    originals = list(transform.transforms)
    dataset = Images(transform=transform)
    loader = DataLoader(dataset, batch_size=4)
    costs = measure_getitem_costs(loader, samples=8)
    names = [c.name for c in costs]
    assert names == ["to_float", "RandomFlip", "SlowBlur", "Scale", OUTSIDE_TRANSFORMS, COLLATE]
    worst = max(costs, key=lambda c: c.share)
    assert worst.name == "SlowBlur"
    assert worst.share > 0.8
    assert worst.ms_per_batch >= 4 * 30.0 * 0.9
    assert worst.calls_per_sample == pytest.approx(1.0)
    assert sum(c.share for c in costs) == pytest.approx(1.0)
    # The user's objects are untouched.
    assert dataset.transform is transform
    assert transform.transforms == originals
    assert [type(t).__name__ for t in transform.transforms] == [
        "function",
        "RandomFlip",
        "SlowBlur",
        "Scale",
    ]
    (finding,) = transform_findings(costs)
    assert finding.kind == "loader.costly_transform"
    assert finding.detail["name"] == "SlowBlur"
    assert "SlowBlur" in finding.title


def test_transforms_found_through_a_subset_and_torchvision_style_attributes():
    class StandardTransform:  # torchvision's VisionDataset.transforms wrapper
        def __init__(self, transform):
            self.transform = transform

        def __call__(self, x):
            return self.transform(x)

    class Vision(Images):
        def __init__(self, transform):
            super().__init__(transform=transform)
            self.transforms = StandardTransform(transform)

        def __getitem__(self, i):
            return self.transforms(torch.arange(16, dtype=torch.uint8) + i)

    transform = pipeline()
    subset = Subset(Vision(transform), range(0, 20, 2))
    (pipe,) = find_transform_pipelines(subset)
    assert pipe.compose is transform
    assert sorted(pipe.paths) == [("dataset", "transform"), ("dataset", "transforms", "transform")]
    costs = measure_getitem_costs(subset, samples=4)
    assert max(costs, key=lambda c: c.share).name == "SlowBlur"
    assert subset.dataset.transforms.transform is transform


def test_random_transforms_do_not_advance_the_users_random_state():
    dataset = Images(transform=Compose([RandomFlip(), to_float]))
    random.seed(5)
    expected = random.random()
    random.seed(5)
    measure_getitem_costs(dataset, samples=8)
    assert random.random() == expected


class Decoding(Dataset):
    """No Compose: the cost sits in a helper function that __getitem__ calls."""

    def __len__(self) -> int:
        return 50

    def __getitem__(self, i: int) -> torch.Tensor:
        raw = read_bytes(i)
        image = decode_image(raw)
        return normalise(image)


def read_bytes(i: int) -> bytes:
    return bytes([i % 256]) * 64


def decode_image(raw: bytes) -> torch.Tensor:
    # A busy loop, so the cost is CPU time inside this function, as a real decoder's is.
    deadline = time.perf_counter() + 0.015
    total = 0
    while time.perf_counter() < deadline:
        total += 1
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def normalise(x: torch.Tensor) -> torch.Tensor:
    return x.float() / 255


def test_without_compose_a_profile_names_the_costly_function():
    costs = measure_getitem_costs(DataLoader(Decoding(), batch_size=2), samples=6)
    top = max((c for c in costs if c.kind == "function"), key=lambda c: c.share)
    assert top.name.startswith("decode_image (test_transforms.py:")
    assert top.share > 0.6
    assert top.calls_per_sample == pytest.approx(1.0)
    assert costs[-1].name == COLLATE
    assert sum(c.share for c in costs) == pytest.approx(1.0)


def test_profile_descends_through_wrappers_to_the_users_getitem():
    costs = measure_getitem_costs(Subset(Decoding(), range(10)), samples=4)
    assert max(costs, key=lambda c: c.share).name.startswith("decode_image")


def test_iterable_dataset_with_transforms():
    class Stream(IterableDataset):
        def __init__(self):
            self.transform = pipeline()

        def __iter__(self):
            for i in range(6):
                yield self.transform(torch.ones(4) * i)

    costs = measure_getitem_costs(Stream(), samples=3)
    assert max(costs, key=lambda c: c.share).name == "SlowBlur"


def test_costly_collate_is_reported():
    def slow_collate(batch):
        time.sleep(0.05)
        return torch.stack(batch)

    costs = measure_getitem_costs(DataLoader(Images(), batch_size=4, collate_fn=slow_collate))
    worst = max(costs, key=lambda c: c.share)
    assert worst.name == COLLATE
    (finding,) = transform_findings(costs)
    assert "collate" in finding.fix


def test_compose_detection_is_duck_typed():
    assert is_compose_like(pipeline())
    assert not is_compose_like(Compose([]))
    assert not is_compose_like(Compose([1, 2]))
    assert not is_compose_like(Scale(1.0))
    assert find_transform_pipelines(Images()) == []


def test_transform_costs_arithmetic():
    costs = transform_costs([("A", 2.0, 1.0), ("B", 6.0, 1.0)], 10.0, batch_size=4, collate_ms=8.0)
    assert [(c.name, c.ms_per_batch) for c in costs] == [
        ("A", 8.0),
        ("B", 24.0),
        (OUTSIDE_TRANSFORMS, 8.0),
        (COLLATE, 8.0),
    ]
    assert costs[1].share == pytest.approx(0.5)


def test_no_finding_when_nothing_dominates():
    even = [TransformCost(name, 0.2, 1.0) for name in "ABCDE"]
    assert transform_findings(even) == []


def test_function_names():
    assert function_name(("~", 0, "<built-in method time.sleep>")) == "time.sleep"
    assert function_name(("/a/b/data.py", 12, "decode")) == "decode (data.py:12)"


def test_batch_size_of_a_custom_batch_sampler_and_no_breakdown_without_a_profile():
    from torchdoctor.loader import profile_costs

    loader = DataLoader(Images(transform=pipeline()), batch_sampler=[[0, 1, 2], [3, 4, 5]])
    costs = measure_getitem_costs(loader, samples=3)
    blur = next(c for c in costs if c.name == "SlowBlur")
    assert blur.ms_per_batch >= 3 * 30.0 * 0.9  # 3 samples per batch
    only_total = profile_costs({}, ("x.py", 1, "f"), 20.0, 4, batch_size=2, collate_ms=None)
    assert [(c.name, c.ms_per_batch, c.share) for c in only_total] == [("__getitem__", 40.0, 1.0)]


def test_profile_fallback_restores_a_previous_profile_function():

    calls = []

    def tracer(frame, event, arg):
        calls.append(event)

    sys.setprofile(tracer)
    try:
        measure_getitem_costs(Decoding(), samples=2)
        assert sys.getprofile() is tracer
    finally:
        sys.setprofile(None)
