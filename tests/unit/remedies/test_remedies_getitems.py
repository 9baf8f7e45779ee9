"""Batched reads: ``CachedDataset.__getitems__`` gives what per-sample reads give, faster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, default_collate

from torchdoctor.remedies import CachedDataset, Normalize, build_cache, uint8_collate
from torchdoctor.remedies._collate import GatheredBatch

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def make_folder(root: Path, per_class: int = 9) -> Path:
    rng = np.random.default_rng(3)
    for name in ["owl", "cat", "eel"]:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            array = rng.integers(0, 256, (20 + i, 24 + i, 3), dtype=np.uint8)
            Image.fromarray(array).save(root / name / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("getitems")
    folder = make_folder(root / "photos")
    paths = {"one_shard": root / "one", "many_shards": root / "many"}
    build_cache(folder, paths["one_shard"], size=12, progress=False)
    build_cache(folder, paths["many_shards"], size=12, shard_mb=0.002, progress=False)
    return paths


class PerSample(Dataset):
    """The dataset read one sample at a time (no ``__getitems__``), as before batched reads."""

    def __init__(self, dataset: CachedDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset[index]


def assert_same_samples(got, expected) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        if isinstance(b, dict):
            assert list(a) == list(b)
            a, b = list(a.values()), list(b.values())
        elif not isinstance(b, tuple):
            a, b = [a], [b]
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert type(x) is type(y)
            assert np.asarray(x).dtype == np.asarray(y).dtype
            np.testing.assert_array_equal(x, y)


def assert_same_batch(got, expected) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.stride() == expected.stride()
        assert torch.equal(got, expected)
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for key in expected:
            assert_same_batch(got[key], expected[key])
    else:
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert_same_batch(g, e)


@pytest.mark.parametrize("layout", ["one_shard", "many_shards"])
@pytest.mark.parametrize("in_memory", [False, True])
def test_getitems_gives_the_samples_of_getitem_in_order(caches, layout, in_memory):
    ds = CachedDataset(caches[layout], in_memory=in_memory)
    if layout == "many_shards":
        assert len(ds.manifest["shards"]) > 3
    indices = np.random.default_rng(0).permutation(len(ds)).tolist()[:11] + [-1, -len(ds), 0]
    batch = ds.__getitems__(indices)
    assert isinstance(batch, GatheredBatch) and isinstance(batch, list)
    assert_same_samples(batch, [ds[i] for i in indices])
    image, label = batch[0]
    assert image.dtype == np.uint8 and image.shape == (12, 12, 3)
    assert isinstance(label, np.int64)
    assert ds.__getitems__([]) == []


def test_getitems_refuses_an_index_out_of_range(caches):
    ds = CachedDataset(caches["many_shards"])
    with pytest.raises(IndexError, match=f"index {len(ds)} out of range"):
        ds.__getitems__([0, len(ds)])
    with pytest.raises(IndexError, match="out of range"):
        ds.__getitems__([-len(ds) - 1])


@pytest.mark.parametrize("channels_last", [True, False])
def test_uint8_collate_of_a_gathered_batch_equals_the_per_sample_path(caches, channels_last):
    ds = CachedDataset(caches["many_shards"])
    indices = [5, 0, 26, 3, 3, 17]
    gathered = ds.__getitems__(indices)
    expected = uint8_collate([ds[i] for i in indices], channels_last=channels_last)
    got = uint8_collate(gathered, channels_last=channels_last)
    assert_same_batch(got, expected)
    if channels_last:  # handed over, not copied again
        assert got[0].data_ptr() == gathered.columns["image"].data_ptr()


@pytest.mark.parametrize("collate_fn", [None, uint8_collate], ids=["default", "uint8"])
@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_batches_equal_the_per_sample_path(caches, collate_fn, workers):
    """Shuffled, with a last partial batch (27 samples in batches of 6), in worker processes."""
    ds = CachedDataset(caches["many_shards"])
    assert len(ds) % 6 != 0
    order = np.random.default_rng(1).permutation(len(ds)).tolist()

    def batches(dataset):
        kwargs = {} if collate_fn is None else {"collate_fn": collate_fn}
        loader = DataLoader(dataset, batch_size=6, sampler=order, num_workers=workers, **kwargs)
        return list(loader)

    got, expected = batches(ds), batches(PerSample(ds))
    assert len(got) == 5 and len(got[-1][1]) == len(ds) % 6
    for g, e in zip(got, expected, strict=True):
        assert_same_batch(g, e)
    if collate_fn is None:  # default_collate: NHWC uint8 images, int64 labels, as before
        assert got[0][0].shape == (6, 12, 12, 3) and got[0][0].dtype == torch.uint8


class FixedDicts:
    """Dict samples whose fields all have fixed shapes, of dtypes the collate widens or keeps."""

    def __len__(self) -> int:
        return 13

    def __getitem__(self, i: int) -> dict:
        rng = np.random.default_rng(i)
        return {
            "pixels": rng.integers(0, 256, (4, 5, 1), dtype=np.uint8),
            "depth": rng.integers(0, 60000, (3,), dtype=np.uint16),
            "level": np.uint8(i),
            "score": np.float32(i / 4),
            "flag": bool(i % 2),
            "label": i % 3,
        }


def test_dict_caches_gather_and_collate_like_per_sample_reads(tmp_path):
    build_cache(FixedDicts, tmp_path / "dicts", shard_mb=0.00005, progress=False)
    ds = CachedDataset(tmp_path / "dicts")
    assert len(ds.manifest["shards"]) > 1
    indices = [12, 0, 7, 7, 3]
    gathered = ds.__getitems__(indices)
    assert isinstance(gathered, GatheredBatch)
    per_sample = [ds[i] for i in indices]
    assert_same_samples(gathered, per_sample)
    for channels_last in (True, False):
        assert_same_batch(
            uint8_collate(gathered, channels_last=channels_last),
            uint8_collate(per_sample, channels_last=channels_last),
        )
    assert_same_batch(default_collate(gathered), default_collate(per_sample))
    batch = uint8_collate(gathered)
    assert batch["level"].dtype == torch.int64 and batch["score"].dtype == torch.float64
    assert batch["depth"].dtype == torch.uint16 and batch["flag"].dtype == torch.bool


def test_variable_fields_transforms_and_encoded_caches_read_per_sample(caches, tmp_path):
    build_cache("cache_sources:mixed", tmp_path / "mixed", progress=False)
    mixed = CachedDataset(tmp_path / "mixed")  # variable-size token arrays and bytes
    indices = [9, 2, 40, 2]
    batch = mixed.__getitems__(indices)
    assert not isinstance(batch, GatheredBatch)
    assert_same_samples(batch, [mixed[i] for i in indices])

    flipped = CachedDataset(caches["one_shard"], transform=lambda s: (s[0][::-1], s[1]))
    batch = flipped.__getitems__([4, 1])
    assert not isinstance(batch, GatheredBatch)
    assert_same_samples(batch, [flipped[4], flipped[1]])

    folder = make_folder(tmp_path / "photos", per_class=2)
    build_cache(folder, tmp_path / "enc", encoded=True, progress=False)
    encoded = CachedDataset(tmp_path / "enc")
    batch = encoded.__getitems__([3, 0])
    assert not isinstance(batch, GatheredBatch)
    assert_same_samples(batch, [encoded[3], encoded[0]])


def _gathered_column_is_shared(batch):
    return batch.columns["image"].is_shared(), len(batch)


def test_batches_gathered_in_a_worker_are_in_shared_memory(caches):
    ds = CachedDataset(caches["one_shard"])
    loader = DataLoader(ds, batch_size=4, num_workers=1, collate_fn=_gathered_column_is_shared)
    assert all(shared for shared, _ in loader)
    assert not ds.__getitems__([0]).columns["image"].is_shared()  # main process: plain memory


# --- Normalize: blocked casting on the CPU gives the one-pass result exactly ----------------


def _one_pass(norm: Normalize, images: torch.Tensor) -> torch.Tensor:
    """Normalize as it was before blocked casting: cast everything, then one multiply-add."""
    out = images.to(dtype=norm.dtype, copy=True)
    n, c, h, w = out.shape
    rows = out.permute(0, 2, 3, 1).view(n * h, w * c)
    row_scale, row_shift = norm._row_operands(norm.scale, norm.shift, w)
    torch.addcmul(row_shift, rows, row_scale, out=rows)
    return out


@pytest.mark.parametrize("shape", [(3, 300, 290), (5, 7, 9), (2, 700, 800)])
def test_blocked_normalize_equals_the_one_pass_result_bit_for_bit(shape):
    n, h, w = shape
    nhwc = torch.randint(0, 256, (n, h, w, 3), dtype=torch.uint8, generator=torch.Generator())
    images = nhwc.permute(0, 3, 1, 2)  # channels-last, as uint8_collate gives
    norm = Normalize(MEAN, STD)
    out = norm(images)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, _one_pass(norm, images))
    assert torch.equal(norm(images.contiguous()), out)  # the NCHW path agrees
