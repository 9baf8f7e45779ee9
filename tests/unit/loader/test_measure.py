"""Measuring and sweeping real DataLoaders (real worker processes, or a fake clock)."""

from __future__ import annotations

import pytest
import torch
from test_clone import Squares
from torch.utils.data import DataLoader, Dataset

from loader_datasets import Disk
from torchdoctor.loader import (
    SweepPolicy,
    measure_loader,
    measure_loader_alone,
    measure_loader_point,
    sweep_candidates,
    sweep_loader,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Ticking(Dataset):
    """Each sample advances a fake clock by ``cost_s``: exact, load-independent timings."""

    def __init__(self, clock: FakeClock, n: int, cost_s: float) -> None:
        self.clock, self.n, self.cost_s = clock, n, cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.clock.now += self.cost_s
        return i


def test_measure_loader_with_a_fake_clock():
    clock = FakeClock()
    loader = DataLoader(Ticking(clock, 40, 0.010), batch_size=2)
    point = measure_loader_point(loader, 0, batches=5, clock=clock)
    assert point.batches_per_s == pytest.approx(50.0)  # 20 ms per batch
    assert point.first_batch_ms == pytest.approx(20.0)
    assert point.batches == 5
    assert measure_loader(loader, 0, batches=5, clock=clock) == pytest.approx(50.0)


def test_loader_alone_counts_whole_rounds_after_the_warm_up():
    loader = DataLoader(Disk(40, 0.0, 0.005), batch_size=1)
    alone = measure_loader_alone(loader, 5)
    assert alone.batches == 5 and alone.needed_batches_per_s is None
    assert alone.first_batch_ms is not None
    assert alone.seconds == pytest.approx(5 / alone.batches_per_s, rel=0.02)


def test_measure_loader_stops_at_the_budget_and_at_the_end_of_the_data():
    clock = FakeClock()
    loader = DataLoader(Ticking(clock, 40, 0.010), batch_size=2)
    point = measure_loader_point(loader, 0, batches=100, clock=clock, budget_s=0.05)
    assert point.batches == 3  # 60 ms >= 50 ms
    short = measure_loader_point(loader, 0, batches=100, clock=clock)
    assert short.batches == 19  # 20 batches, the first is the warm-up
    assert short.batches_per_s == pytest.approx(50.0)


def test_measuring_leaves_random_state_and_the_users_loader_alone():
    gen = torch.Generator().manual_seed(7)
    loader = DataLoader(Squares(), batch_size=4, shuffle=True, generator=gen, num_workers=2)
    gen_state = gen.get_state()
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    measure_loader(loader, 2, batches=3)
    assert torch.equal(torch.rand(2), expected)
    assert torch.equal(gen.get_state(), gen_state)
    assert loader._iterator is None  # the user's loader was never iterated


# Timing: the plateau is decided on measured rates; beside the other tests' workers a setting of
# 12 batches can read 20% apart from its neighbour, so it runs in the timing tier (alone).
@pytest.mark.integration
@pytest.mark.timing
def test_sweep_pick_is_within_10_percent_of_an_exhaustive_sweep():
    # 4 samples/batch x (10 ms serial + 15 ms parallel): 10 batches/s with no worker, at most
    # 25/s (the serial part) from 4 workers on.
    loader = DataLoader(Disk(4000, 0.010, 0.015), batch_size=4)
    candidates = [0, 1, 2, 4, 8, 16]
    policy = SweepPolicy(candidates)
    sweep = sweep_loader(loader, policy, batches_per_setting=12)
    assert sweep.stopped == "plateau"
    exhaustive = {n: measure_loader(loader, n, batches=12) for n in candidates}
    best = max(exhaustive.values())
    quality = exhaustive[sweep.best_workers] / best
    assert quality >= 0.9, (sweep.best_workers, exhaustive)
    assert sweep.best_workers >= 2
    assert [p.num_workers for p in sweep.points] == candidates[: len(sweep.points)]
    assert len(sweep.points) < len(candidates)  # the plateau saved the largest settings
    assert all(p.first_batch_ms is not None for p in sweep.points)


@pytest.mark.integration
def test_sweep_candidates_on_this_machine_run_to_completion():
    import os

    loader = DataLoader(Disk(400, 0.0, 0.004), batch_size=4)
    policy = SweepPolicy(sweep_candidates(os.cpu_count() or 1, 0))
    seen = []
    sweep = sweep_loader(loader, policy, batches_per_setting=5, on_point=seen.append)
    assert [p.num_workers for p in seen] == [p.num_workers for p in sweep.points]
    assert sweep.seconds is not None and sweep.seconds > 0
