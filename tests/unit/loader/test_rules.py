"""The DataLoader argument rules and the warm-up and round rules, written once in the package."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.loader import (
    MIN_ROUNDS,
    WORKER_ONLY,
    counted_batches,
    valid_loader_kwargs,
    warm_batches,
)


def test_without_workers_the_worker_only_arguments_are_reset():
    given = {"num_workers": 0, "persistent_workers": True, "prefetch_factor": 4, "timeout": 5}
    assert valid_loader_kwargs(given) == {
        "num_workers": 0,
        "persistent_workers": False,
        "prefetch_factor": None,
        "timeout": 0,
    }
    assert given["persistent_workers"] is True  # a copy, the caller's dict is left alone
    # num_workers left out is DataLoader's default, 0.
    assert valid_loader_kwargs({"batch_size": 8}) == {"batch_size": 8, **WORKER_ONLY}
    # No timeout is added where none was given.
    assert "timeout" not in valid_loader_kwargs({"num_workers": 0})


def test_with_workers_nothing_changes():
    given = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 4, "timeout": 5}
    assert valid_loader_kwargs(given) == given


def test_dataloader_accepts_and_iterates_what_the_rule_gives():
    dataset = TensorDataset(torch.arange(8.0))
    kwargs = {"num_workers": 0, "persistent_workers": True, "prefetch_factor": 4, "timeout": 5}
    with pytest.raises((ValueError, AssertionError)):  # the rule is needed
        list(DataLoader(dataset, batch_size=4, **{**kwargs, "persistent_workers": False}))
    loader = DataLoader(dataset, batch_size=4, **valid_loader_kwargs(kwargs))
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # A script's "spawn" context: DataLoader refuses it without workers (a clone at 0 workers).
    spawn = {"num_workers": 0, "multiprocessing_context": "spawn"}
    with pytest.raises(ValueError):
        DataLoader(dataset, batch_size=4, **spawn)
    assert len(DataLoader(dataset, batch_size=4, **valid_loader_kwargs(spawn))) == 2


def test_warm_up_is_the_prefetched_batches_and_at_least_one():
    assert warm_batches(0) == 1  # the first batch pays for creating the iterator
    assert warm_batches(0, None) == 1
    assert warm_batches(1) == 2  # DataLoader's default prefetch_factor is 2
    assert warm_batches(4, 2) == 8
    assert warm_batches(4, 3) == 12


def test_counted_batches_are_whole_rounds_and_at_least_two_of_them():
    assert MIN_ROUNDS == 2
    assert counted_batches(0, 5) == 5
    assert counted_batches(0, 1) == 2
    assert counted_batches(1, 7) == 7
    assert counted_batches(4, 5) == 8  # 2 rounds of 4
    assert counted_batches(4, 9) == 12  # 3 rounds
    assert counted_batches(16, 30) == 32
    assert counted_batches(3, 12) == 12


def test_the_loader_package_and_its_renderer_do_not_import_torch():
    code = (
        "import sys\n"
        "import torchdoctor.loader, torchdoctor.record, torchdoctor.report.loader\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
