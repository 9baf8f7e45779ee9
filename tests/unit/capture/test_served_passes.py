"""A pass over a DataLoader whose batches a phase serves ends where the loader's own would."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from torchdoctor.capture._loaders import ServedPasses


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(12.0)), batch_size=4)  # 3 batches a pass


def test_a_served_pass_ends_after_len_batches():
    passes, it = ServedPasses(), iter(_loader())
    for _ in range(len(it)):
        passes.serving(it)
    with pytest.raises(StopIteration):
        passes.serving(it)


def test_a_pass_begun_by_the_loader_ends_after_its_remaining_batches():
    passes, it = ServedPasses(), iter(_loader())
    next(it)  # the script drew one batch before the phase began serving
    passes.serving(it)
    passes.serving(it)
    with pytest.raises(StopIteration):
        passes.serving(it)


def test_the_loader_ends_early_by_the_batches_served_in_its_pass():
    passes, it = ServedPasses(), iter(_loader())
    passes.serving(it)
    passes.serving(it)  # then the phase ends and the loader loads again
    passes.loading(it)
    next(it)
    with pytest.raises(StopIteration):
        passes.loading(it)


def test_a_loader_never_served_is_left_to_itself():
    passes, it = ServedPasses(), iter(_loader())
    for _ in range(3):
        next(it)
    passes.loading(it)  # its own StopIteration comes from its sampler


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(100))

    def __len__(self):  # an estimate: the stream may yield more
        return 2


def test_an_iterable_datasets_pass_is_not_bounded():
    passes, it = ServedPasses(), iter(DataLoader(_Stream(), batch_size=1))
    for _ in range(5):
        passes.serving(it)


def test_the_pass_after_one_a_phase_ended_is_built_without_workers():
    # The phase serves that pass too: workers would only start and take the sweep's cores.
    loader = DataLoader(TensorDataset(torch.arange(12.0)), batch_size=4, num_workers=2)
    passes, built_with = ServedPasses(), []

    def make(lo):
        built_with.append(lo.num_workers)
        return iter(DataLoader(lo.dataset, batch_size=4))  # single-process: nothing starts

    it = passes.new_pass(loader, make)
    for _ in range(3):
        passes.serving(it)
    with pytest.raises(StopIteration):
        passes.serving(it)
    passes.new_pass(loader, make)
    passes.new_pass(loader, make)  # a pass the loader began itself: its own workers
    assert built_with == [2, 0, 2] and loader.num_workers == 2


class _EndlessSampler(torch.utils.data.Sampler):
    """An endless sampler, as scripts that draw a fixed number of steps write one."""

    def __iter__(self):
        while True:
            yield 0

    def __len__(self):
        raise NotImplementedError("endless")


def test_a_pass_whose_sampler_refuses_a_length_is_never_ended():
    loader = DataLoader(TensorDataset(torch.arange(4.0)), sampler=_EndlessSampler())
    passes, it = ServedPasses(), iter(loader)
    for _ in range(10):
        passes.serving(it)  # raised the sampler's NotImplementedError into the script's next()


def test_a_clone_of_the_loader_keeps_its_workers_after_a_served_pass():
    # The worker sweep's clones share the script's dataset: a clone with 2 workers, iterated
    # after a served pass ended, was built without any (its figure was the in-process loader's).
    from torchdoctor.loader import clone_loader

    loader = DataLoader(TensorDataset(torch.arange(12.0)), batch_size=4, num_workers=2)
    passes, built_with = ServedPasses(), []

    def make(lo):
        built_with.append(lo.num_workers)
        return iter(DataLoader(lo.dataset, batch_size=4))

    it = passes.new_pass(loader, make)
    for _ in range(3):
        passes.serving(it)
    with pytest.raises(StopIteration):
        passes.serving(it)
    passes.new_pass(clone_loader(loader, num_workers=2), make)  # the clone: its own workers
    passes.new_pass(loader, make)  # the script's next pass: served, without workers
    assert built_with == [2, 2, 0]
