"""Bytes per batch, batches in flight, dtype advice and copy-on-read detection."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from torchdoctor.loader import (
    COPY_ON_READ_MIN_GROWTH_MB,
    WorkerMemorySampler,
    copy_on_read_finding,
    describe_batch,
    detect_copy_on_read,
    dtype_advice,
    loader_memory,
    sample_batch,
    sample_children,
    sample_worker_memory,
)
from torchdoctor.record import BatchLeaf

#: Seconds each: left out of `make test-fast`.
pytestmark = pytest.mark.slow


def seed_000_batch() -> list[BatchLeaf]:
    """Seed 000's Cityscapes batch: 32 RGB 512x512 float32 images normalised on the CPU and
    their int64 masks (described, not allocated)."""
    return [
        BatchLeaf("batch[0]", "float32", [32, 3, 512, 512], 32 * 3 * 512 * 512 * 4, -2.1, 2.6, 0.0),
        BatchLeaf("batch[1]", "int64", [32, 512, 512], 32 * 512 * 512 * 8, 0.0, 18.0),
    ]


def test_seed_000_arithmetic():
    leaves = seed_000_batch()
    assert [leaf.nbytes for leaf in leaves] == [100_663_296, 67_108_864]
    # Seed 000 counts one batch per worker: prefetch_factor=1, 8 workers.
    memory = loader_memory(leaves, num_workers=8, prefetch_factor=1)
    assert memory.bytes_per_batch == 167_772_160
    assert memory.batches_in_flight == 8
    assert memory.bytes_in_flight == 8 * 167_772_160
    # uint8 images and masks: "33 MB per batch instead of 167 MB, 5x less".
    assert memory.bytes_per_batch_advised == 25_165_824 + 8_388_608
    # DataLoader's default prefetch_factor is 2 batches per worker.
    assert loader_memory(leaves, 8, None).bytes_in_flight == 16 * 167_772_160
    assert loader_memory(leaves, 0, None).bytes_in_flight == 167_772_160


def test_dtype_advice_for_images_masks_and_float64():
    findings = dtype_advice(
        [*seed_000_batch(), BatchLeaf("batch[2]", "float64", [32, 1000], 256_000 * 8 * 10)]
    )
    titles = {f.detail["path"]: f for f in findings}
    assert set(titles) == {"batch[0]", "batch[1]", "batch[2]"}
    assert "uint8" in titles["batch[0]"].title and ".float().div_(255)" in titles["batch[0]"].fix
    assert "uint8" in titles["batch[1]"].fix and "target.long()" in titles["batch[1]"].fix
    assert titles["batch[1]"].detail["saved_bytes"] == 67_108_864 - 8_388_608
    assert "float32" in titles["batch[2]"].fix


def test_no_dtype_advice_for_small_labels_raw_pixels_or_wide_masks():
    n = 32 * 256 * 256
    leaves = [
        BatchLeaf("img", "uint8", [32, 3, 256, 256], 3 * n),
        BatchLeaf("raw", "float32", [32, 3, 256, 256], 3 * n * 4, 0.0, 255.0, 120.0),
        BatchLeaf("labels", "int64", [32], 256, 0.0, 9.0),
        BatchLeaf("ids", "int64", [32, 256, 256], n * 8, 0.0, 70000.0),
    ]
    assert dtype_advice(leaves) == []
    # Worth advising in a large batch, not in a tiny one (12 kB of images).
    normalised = BatchLeaf("x", "float32", [32, 3, 256, 256], 3 * n * 4, -1.0, 1.0, 0.0)
    assert len(dtype_advice([normalised])) == 1
    tiny = BatchLeaf("x", "float32", [4, 3, 16, 16], 4 * 3 * 16 * 16 * 4, -1.0, 1.0, 0.0)
    assert dtype_advice([tiny]) == []


def test_describe_a_real_batch():
    class Seg(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            image = torch.rand(3, 256, 256) - 0.5
            return {"image": image, "mask": torch.zeros(256, 256, dtype=torch.long), "n": i}

    batch = sample_batch(DataLoader(Seg(), batch_size=4))
    leaves = describe_batch(batch)
    assert [(leaf.path, leaf.dtype, leaf.shape) for leaf in leaves] == [
        ("batch['image']", "float32", [4, 3, 256, 256]),
        ("batch['mask']", "int64", [4, 256, 256]),
        ("batch['n']", "int64", [4]),
    ]
    assert leaves[0].nbytes == 4 * 3 * 256 * 256 * 4
    assert -0.5 <= leaves[0].min < leaves[0].max <= 0.5
    assert {f.detail["path"] for f in dtype_advice(leaves)} == {"batch['image']", "batch['mask']"}
    numpy_leaves = describe_batch((np.zeros((2, 3), dtype=np.float64), "text"))
    assert [(leaf.dtype, leaf.nbytes) for leaf in numpy_leaves] == [("float64", 48)]


def test_describe_a_batch_held_in_a_dataclass_and_an_attribute_holder():
    from dataclasses import dataclass

    @dataclass
    class Pair:
        image: torch.Tensor
        label: int

    class Holder:
        def __init__(self) -> None:
            self.pixels = torch.zeros(2, 4, dtype=torch.uint8)

    leaves = describe_batch([Pair(torch.ones(2, 3), 1), Holder()])
    assert [(leaf.path, leaf.nbytes) for leaf in leaves] == [
        ("batch[0].image", 24),
        ("batch[1].pixels", 8),
    ]


def test_copy_on_read_series():
    growing = [100.0 + 3.0 * i for i in range(30)]  # +87 MB, steady
    result = detect_copy_on_read(growing)
    assert result.flagged
    assert result.growth_mb == pytest.approx(3.0 * (26 - 3))  # medians of first/last quarter
    flat = [100.0 + (i % 3) for i in range(30)]
    assert not detect_copy_on_read(flat).flagged
    # One allocation as the workers start, then flat: not growth through the run.
    step = [100.0] * 3 + [160.0] * 27
    assert not detect_copy_on_read(step).flagged
    small = [100.0 + 0.5 * i for i in range(30)]  # steady but only +15 MB
    assert small[-1] - small[0] < COPY_ON_READ_MIN_GROWTH_MB
    assert not detect_copy_on_read(small).flagged
    assert not detect_copy_on_read([1.0, 500.0]).flagged  # too few samples
    finding = copy_on_read_finding(result, "PyRows", num_workers=4)
    assert finding is not None and finding.kind == "loader.copy_on_read"
    assert "numpy" in finding.fix and "CachedDataset" in finding.fix
    assert finding.detail["projected_mb"] == pytest.approx(4 * result.growth_mb)
    assert copy_on_read_finding(detect_copy_on_read(flat), "D", 4) is None


ROWS, COLS = 2000, 2000  # 4M values: 32 MB as float64, about 130 MB as Python floats


class PythonRows(Dataset):
    """Samples held as lists of Python floats: reading them writes their refcounts."""

    def __init__(self) -> None:
        self.rows = [[float(i + j) for j in range(COLS)] for i in range(ROWS)]

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.002)  # spread the epoch over enough memory samples
        return torch.tensor(self.rows[i])


class NumpyRows(Dataset):
    """The same values in one numpy array: reading writes nothing shared."""

    def __init__(self) -> None:
        self.rows = np.arange(ROWS, dtype=np.float64)[:, None] + np.arange(COLS)[None, :]

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.002)
        return torch.from_numpy(self.rows[i].copy())


@pytest.mark.integration
def test_python_list_dataset_is_flagged_and_numpy_dataset_is_not():
    python_series = sample_worker_memory(DataLoader(PythonRows(), batch_size=16, num_workers=2))
    python_result = detect_copy_on_read(python_series.uss_mb_per_worker)
    assert python_result.flagged, python_series
    # RSS does not show it: a forked worker's RSS counts the pages it still shares.
    assert not detect_copy_on_read(python_series.rss_mb_per_worker).flagged
    numpy_series = sample_worker_memory(DataLoader(NumpyRows(), batch_size=16, num_workers=2))
    numpy_result = detect_copy_on_read(numpy_series.uss_mb_per_worker)
    assert not numpy_result.flagged, numpy_series
    assert numpy_result.growth_mb < COPY_ON_READ_MIN_GROWTH_MB / 2


def test_sampler_thread_stops_and_sees_no_workers_without_children():
    with WorkerMemorySampler(interval_s=0.01) as sampler:
        time.sleep(0.05)
    assert sampler.series.workers == []


def test_one_child_sampler_reads_each_live_worker():
    import psutil

    from torchdoctor.loader import shutdown_workers

    me = psutil.Process()
    assert sample_children(me).count == 0
    loader = DataLoader(NumpyRows(), batch_size=16, num_workers=2)
    it = iter(loader)
    try:
        next(it)
        cheap = sample_children(me)
        full = sample_children(me, uss=True)
    finally:
        shutdown_workers(it)
    assert cheap.count == 2 and cheap.uss_mb == []  # USS only when asked: it reads smaps
    assert full.count == 2 and len(full.uss_mb) == 2
    assert all(0 < uss <= rss for uss, rss in zip(full.uss_mb, full.rss_mb))
