"""Cloning, measuring and sweeping real DataLoaders (real worker processes)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler

from loader_datasets import Disk
from torchdoctor.analysis.worker_sweep import SweepPolicy, sweep_candidates
from torchdoctor.capture.loader_sweep import (
    clone_loader,
    measure_loader,
    measure_loader_point,
    preserved_random_state,
    sample_batch,
    sweep_loader,
)


class Squares(Dataset):
    def __init__(self, n: int = 40) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i, i * i])


class Stream(IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, 20, step):
            yield torch.tensor(i)


def my_collate(batch):
    return torch.stack(batch) * 10


def my_init(worker_id: int) -> None:
    torch.manual_seed(worker_id)


def as_lists(loader) -> list:
    return [b.tolist() for b in loader]


def test_clone_copies_construction_settings():
    gen = torch.Generator().manual_seed(1)
    loader = DataLoader(
        Squares(),
        batch_size=4,
        shuffle=True,
        collate_fn=my_collate,
        drop_last=True,
        worker_init_fn=my_init,
        generator=gen,
        num_workers=2,
        prefetch_factor=3,
        persistent_workers=True,
        timeout=30,
    )
    clone = clone_loader(loader)
    assert clone is not loader
    for attr in (
        "dataset",
        "batch_size",
        "drop_last",
        "collate_fn",
        "worker_init_fn",
        "generator",
        "sampler",
        "num_workers",
        "prefetch_factor",
        "persistent_workers",
        "timeout",
        "pin_memory",
    ):
        assert getattr(clone, attr) is getattr(loader, attr) or getattr(clone, attr) == getattr(
            loader, attr
        ), attr
    single = clone_loader(loader, num_workers=0)
    assert single.num_workers == 0 and single.prefetch_factor is None
    assert not single.persistent_workers
    # Same data, same order (the shared generator's state is restored around the first pass).
    with preserved_random_state(loader):
        first = as_lists(single)
    assert as_lists(single) == first
    assert sorted(x for b in first for x in b) == sorted([10 * i, 10 * i * i] for i in range(40))


def test_clone_without_automatic_batching():
    loader = DataLoader(Squares(5), batch_size=None)
    clone = clone_loader(loader, num_workers=2)
    assert clone.batch_size is None
    assert as_lists(clone) == [[i, i * i] for i in range(5)]


def test_clone_keeps_a_custom_batch_sampler():
    batches = [[0, 1, 2], [3], [4, 5]]
    loader = DataLoader(Squares(6), batch_sampler=batches)
    clone = clone_loader(loader, num_workers=1)
    assert clone.batch_sampler is batches
    assert [len(b) for b in clone] == [3, 1, 2]
    sampler = BatchSampler(SequentialSampler(range(6)), batch_size=4, drop_last=False)
    assert [len(b) for b in clone_loader(DataLoader(Squares(6), batch_sampler=sampler))] == [4, 2]


def test_clone_of_an_iterable_dataset():
    loader = DataLoader(Stream(), batch_size=5, num_workers=0)
    clone = clone_loader(loader, num_workers=2)
    values = sorted(v for b in clone for v in b.tolist())
    assert values == list(range(20))


def test_overriding_batch_size_replaces_a_custom_batch_sampler():
    loader = DataLoader(Squares(6), batch_sampler=[[0, 1, 2, 3, 4, 5]])
    assert [len(b) for b in clone_loader(loader, batch_size=2, sampler=None)] == [2, 2, 2]
    shuffled = clone_loader(DataLoader(Squares(6), batch_size=3), shuffle=True)
    assert type(shuffled.sampler).__name__ == "RandomSampler"


def test_sample_batch_does_not_advance_random_state():
    loader = DataLoader(Squares(), batch_size=8, shuffle=True)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    batch = sample_batch(loader)
    assert batch.shape == (8, 2)
    assert torch.equal(torch.rand(3), expected)


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


@pytest.mark.integration
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
