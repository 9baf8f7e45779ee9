"""Cloning a user's DataLoader and reading its settings, without touching it."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler

from torchdoctor.loader import (
    clone_loader,
    loader_settings,
    preserved_random_state,
    sample_batch,
    shutdown_workers,
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


def test_loader_settings_describe_the_loader():
    s = loader_settings(DataLoader(Squares(10), batch_size=4, num_workers=2, pin_memory=True))
    assert s.dataset.rsplit(".", 1)[-1] == "Squares"  # qualified by its module
    assert (s.dataset_len, s.batch_size, s.num_workers) == (10, 4, 2)
    assert s.pin_memory and s.prefetch_factor == 2
    assert s.sampler == "BatchSampler(SequentialSampler)"
    assert s.collate_fn.endswith(".default_collate") and not s.iterable


def test_a_clone_without_workers_drops_the_worker_only_settings():
    loader = DataLoader(
        Squares(8), batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=3
    )
    clone = clone_loader(loader, num_workers=0)
    assert (clone.num_workers, clone.persistent_workers, clone.prefetch_factor) == (0, False, None)
    assert [b.tolist()[0] for b in clone] == [[0, 0], [4, 16]]
    assert loader.persistent_workers and loader.prefetch_factor == 3  # the user's is unchanged


def test_stopping_workers_that_die_while_stopped_is_no_error():
    # torch's SIGCHLD handler raises in the joining thread when a spawned worker aborts on being
    # stopped mid-batch; the iterator's own cleanup has run by then.
    class Iterator:
        def __init__(self, message):
            self.message = message

        def _shutdown_workers(self):
            raise RuntimeError(self.message)

    shutdown_workers(Iterator("DataLoader worker (pid 9) is killed by signal: Aborted. "))
    with pytest.raises(RuntimeError, match="something else"):
        shutdown_workers(Iterator("something else"))
