"""The batch size a loader's sampler chain carries, and clones of loaders built on one."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from torchdoctor.loader import (
    batch_size_of,
    clone_loader,
    loader_settings,
    preserved_random_state,
    sampler_chain,
)
from torchdoctor.record import BATCH_SIZE_ARGUMENT


def rows(n: int = 40) -> TensorDataset:
    return TensorDataset(torch.arange(n * 2, dtype=torch.float32).view(n, 2))


class SkipFirst:
    """A user's wrapper around a batch sampler, shaped like accelerate's SkipBatchSampler: it
    keeps what it wraps and names no batch size of its own."""

    def __init__(self, batch_sampler, skip: int = 1) -> None:
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __iter__(self):
        for i, batch in enumerate(self.batch_sampler):
            if i >= self.skip:
                yield batch

    def __len__(self) -> int:
        return len(self.batch_sampler) - self.skip


class Pairs:
    """A batch sampler with no ``batch_size`` attribute anywhere in it."""

    def __iter__(self):
        return iter([[0, 1], [2, 3], [4, 5]])

    def __len__(self) -> int:
        return 3


class Chunks(IterableDataset):
    """An iterable dataset that batches itself: the DataLoader runs with ``batch_size=None``."""

    def __iter__(self):
        for start in range(0, 36, 6):
            yield torch.arange(start, start + 6).view(6, 1).float()


def as_lists(loader) -> list:
    return [b[0].tolist() if isinstance(b, list) else b.tolist() for b in loader]


def sequential(batch_size: int) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(40)), batch_size=batch_size, drop_last=False)


#: (loader, the batch size it reports, where from): each shape a script's loader takes.
SHAPES = {
    "plain": (lambda: DataLoader(rows(), batch_size=4), 4, BATCH_SIZE_ARGUMENT),
    "batch sampler": (
        lambda: DataLoader(rows(), batch_sampler=sequential(8)),
        8,
        "batch_sampler.batch_size",
    ),
    "wrapped batch sampler": (
        lambda: DataLoader(rows(), batch_sampler=SkipFirst(sequential(5))),
        5,
        "batch_sampler.batch_sampler.batch_size",
    ),
    "batch sampler without a size": (lambda: DataLoader(rows(), batch_sampler=Pairs()), None, None),
    "iterable dataset batching itself": (lambda: DataLoader(Chunks(), batch_size=None), None, None),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_settings_give_the_batch_size_the_loader_really_yields(shape):
    make, size, source = SHAPES[shape]
    loader = make()
    settings = loader_settings(loader)
    assert (settings.batch_size, settings.batch_size_source) == (size, source)
    assert batch_size_of(loader) == (size, source)
    if size is not None:
        (first,) = next(iter(loader))
        assert len(first) == size


@pytest.mark.parametrize("shape", SHAPES)
def test_a_clone_of_each_shape_builds_and_yields_the_same_batches(shape):
    # DataLoader raises for batch_size (or sampler, shuffle, drop_last) next to a batch_sampler.
    loader = SHAPES[shape][0]()
    expected = as_lists(loader)
    for workers in (0, 1):
        clone = clone_loader(loader, num_workers=workers, persistent_workers=False)
        assert clone.batch_sampler is loader.batch_sampler or loader.batch_size is not None
        assert as_lists(clone) == expected, (shape, workers)


def test_accelerates_wrappers_give_each_process_its_batch():
    data_loader = pytest.importorskip("accelerate.data_loader")
    inner = sequential(8)
    skipping = DataLoader(rows(), batch_sampler=data_loader.SkipBatchSampler(inner, 1))
    assert batch_size_of(skipping) == (8, "batch_sampler.batch_sampler.batch_size")
    shard = data_loader.BatchSamplerShard(
        inner, num_processes=2, process_index=0, split_batches=True
    )
    split = DataLoader(rows(), batch_sampler=shard)
    assert batch_size_of(split) == (4, "batch_sampler.batch_size / batch_sampler.num_processes")
    assert len(next(iter(split))[0]) == 4
    whole = data_loader.BatchSamplerShard(inner, num_processes=2, process_index=0)
    assert batch_size_of(DataLoader(rows(), batch_sampler=whole))[0] == 8
    assert len(next(iter(DataLoader(rows(), batch_sampler=whole)))[0]) == 8


def test_the_chain_is_followed_through_wrappers_and_cycles_end_it():
    random_sampler = RandomSampler(range(40))
    inner = BatchSampler(random_sampler, batch_size=4, drop_last=False)
    outer = SkipFirst(inner)
    outer.sampler = outer  # a wrapper that points at itself must not loop
    loader = DataLoader(rows(), batch_sampler=outer)
    paths = [path for path, _ in sampler_chain(loader)]
    assert paths == [
        "batch_sampler",
        "batch_sampler.batch_sampler",
        "batch_sampler.batch_sampler.sampler",
        "sampler",
    ]


def test_iterating_a_clone_restores_the_generator_of_a_wrapped_sampler():
    generator = torch.Generator().manual_seed(3)
    wrapped = SkipFirst(BatchSampler(RandomSampler(range(40), generator=generator), 4, False))
    loader = DataLoader(rows(), batch_sampler=wrapped)
    state = generator.get_state()
    with preserved_random_state(loader):
        list(clone_loader(loader, num_workers=0))
    assert torch.equal(generator.get_state(), state)  # the user's next epoch draws the same order


def test_a_property_that_raises_reads_as_no_size():
    class Broken(Pairs):
        @property
        def batch_size(self):
            raise RuntimeError("not ready")

    assert batch_size_of(DataLoader(rows(), batch_sampler=Broken())) == (None, None)
