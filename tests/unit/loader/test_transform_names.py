"""Transforms are named as the user knows them: a module transform by its class (not
``nn.Module.__call__``), torch's code reached from ``__getitem__`` as torch's, with advice that
fits it (not an offline cache for seeding)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from torchdoctor.loader import is_compose_like, measure_getitem_costs, transform_findings

#: Seconds each: left out of `make test-fast`.
pytestmark = pytest.mark.slow


class Blur(nn.Module):
    """The costly transform: 20 ms per sample."""

    def forward(self, x):
        time.sleep(0.020)
        return x


class Normalize(nn.Module):
    def forward(self, x):
        return (x - 0.5) / 0.25


class Images(Dataset):
    def __init__(self, transform) -> None:
        self.transform = transform

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        return self.transform(torch.full((4,), float(i))), i % 2


class Seeded(Dataset):
    """Seeds a generator for every sample (torchvision's FakeData does): torch's code."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        for _ in range(200):
            torch.manual_seed(i)
        return torch.zeros(4)


def test_a_sequential_of_module_transforms_is_timed_per_transform():
    assert is_compose_like(nn.Sequential(Blur(), Normalize()))
    costs = measure_getitem_costs(
        DataLoader(Images(nn.Sequential(Blur(), Normalize())), batch_size=4), samples=4
    )
    worst = max(costs, key=lambda c: c.share)
    assert (worst.name, worst.kind) == ("Blur", "transform")
    assert worst.share > 0.8
    assert "Normalize" in [c.name for c in costs]


def test_a_single_module_transform_is_named_by_its_class_in_a_profile():
    costs = measure_getitem_costs(DataLoader(Images(Blur()), batch_size=4), samples=4)
    worst = max(costs, key=lambda c: c.share)
    assert worst.name == "Blur", [c.name for c in costs]
    assert "_wrapped_call_impl" not in " ".join(c.name for c in costs)


def test_library_code_reached_from_getitem_is_named_as_the_librarys_with_fitting_advice():
    costs = measure_getitem_costs(DataLoader(Seeded(), batch_size=4), samples=4)
    worst = max(costs, key=lambda c: c.share)
    assert worst.kind == "library", [(c.name, c.kind) for c in costs]
    assert "in torch" in worst.name
    (finding,) = transform_findings(costs)
    assert finding.detail["kind"] == "library"
    assert "cache" not in finding.fix.lower()
    assert "once per worker" in finding.fix


def test_torchs_own_getitem_is_not_the_users_transform():
    dataset = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    costs = measure_getitem_costs(DataLoader(dataset, batch_size=8), samples=8)
    assert not [c for c in costs if c.kind in ("function", "transform")], [
        (c.name, c.kind) for c in costs
    ]
    assert [c.kind for c in costs][0] == "dataset-library"
    assert transform_findings(costs) == []  # nothing of the user's to change
