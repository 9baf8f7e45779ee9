"""uint8 batches: the collate, on-device Normalize, and the device prefetcher (CPU pass-through)."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from torchdoctor import DevicePrefetcher, Normalize, uint8_collate

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def hwc_images(count: int, h: int = 5, w: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(count)]


# --- uint8_collate -------------------------------------------------------------------------


@pytest.mark.parametrize("channels_last", [False, True])
def test_collate_keeps_uint8_and_gives_nchw(channels_last):
    images = hwc_images(4)
    batch = uint8_collate([(im, i) for i, im in enumerate(images)], channels_last=channels_last)
    x, labels = batch
    assert x.dtype == torch.uint8 and x.shape == (4, 3, 5, 7)
    assert x.is_contiguous() != channels_last
    assert x.is_contiguous(memory_format=torch.channels_last) == channels_last
    expected = np.stack(images).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(x.numpy(), expected)
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 1, 2, 3]


def test_collate_handles_dicts_namedtuples_tensors_and_floats():
    Pair = namedtuple("Pair", "image target")
    samples = [
        {
            "pair": Pair(torch.full((3, 2, 2), i, dtype=torch.uint8), np.uint16(i)),
            "score": i / 2,
            "mask": np.ones((4,), dtype=np.bool_),
            "name": f"s{i}",
        }
        for i in range(3)
    ]
    batch = uint8_collate(samples)
    assert isinstance(batch["pair"], Pair)
    assert batch["pair"].image.shape == (3, 3, 2, 2) and batch["pair"].image.dtype == torch.uint8
    assert batch["pair"].target.tolist() == [0, 1, 2]
    assert batch["score"].dtype == torch.float64 and batch["score"].tolist() == [0, 0.5, 1.0]
    assert batch["mask"].dtype == torch.bool and batch["mask"].shape == (3, 4)
    assert batch["name"] == ["s0", "s1", "s2"]


class _ImageList:
    def __init__(self, images):
        self.images = images

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], i


def test_collate_in_worker_processes_gives_the_same_batches():
    images = hwc_images(12)
    loader = DataLoader(_ImageList(images), batch_size=4, num_workers=2, collate_fn=uint8_collate)
    got = torch.cat([x for x, _ in loader])
    np.testing.assert_array_equal(got.numpy(), np.stack(images).transpose(0, 3, 1, 2))


# --- Normalize -----------------------------------------------------------------------------


def _reference(x_nchw_uint8: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (x_nchw_uint8.float() / 255 - mean) / std


def test_normalize_uint8_nchw_and_nhwc():
    x = torch.from_numpy(np.stack(hwc_images(2))).permute(0, 3, 1, 2).contiguous()
    norm = Normalize(MEAN, STD)
    out = norm(x)
    assert out.dtype == torch.float32 and out.shape == x.shape
    torch.testing.assert_close(out, _reference(x), rtol=1e-5, atol=1e-5)
    nhwc = x.permute(0, 2, 3, 1).contiguous()
    torch.testing.assert_close(norm(nhwc), _reference(x), rtol=1e-5, atol=1e-5)
    assert x.dtype == torch.uint8  # input untouched


def test_normalize_scales_of_mean_and_std():
    x = torch.from_numpy(np.stack(hwc_images(2))).permute(0, 3, 1, 2).contiguous()
    in_255 = Normalize([m * 255 for m in MEAN], [s * 255 for s in STD], max_pixel_value=1.0)
    torch.testing.assert_close(in_255(x), _reference(x), rtol=1e-5, atol=1e-5)
    unit = x.float() / 255
    before = unit.clone()
    out = Normalize(MEAN, STD, max_pixel_value=1.0)(unit)
    torch.testing.assert_close(out, _reference(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(unit, before)  # a float input is not normalised in place


def test_normalize_dtype_grey_and_errors():
    x = torch.randint(0, 256, (2, 1, 4, 4), dtype=torch.uint8)
    out = Normalize([0.5], [0.25], dtype=torch.bfloat16)(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), (x.float() / 255 - 0.5) / 0.25, rtol=1e-2, atol=2e-2)
    with pytest.raises(ValueError, match="channel"):
        Normalize(MEAN, STD)(torch.zeros(2, 5, 4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="4-d"):
        Normalize(MEAN, STD)(torch.zeros(3, 4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="positive"):
        Normalize(MEAN, [0.1, 0.0, 0.2])


def test_normalize_passes_gradients_for_float_inputs():
    x = torch.rand(1, 3, 2, 2, requires_grad=True)
    Normalize(MEAN, STD, max_pixel_value=1.0)(x).sum().backward()
    torch.testing.assert_close(x.grad, (1 / torch.tensor(STD)).view(1, 3, 1, 1).expand(1, 3, 2, 2))


# --- DevicePrefetcher ----------------------------------------------------------------------


def test_prefetcher_on_cpu_passes_batches_through_over_epochs():
    images = hwc_images(10)
    loader = DataLoader(_ImageList(images), batch_size=3, collate_fn=uint8_collate)
    prefetcher = DevicePrefetcher(loader, "cpu")
    assert prefetcher.stream is None
    assert len(prefetcher) == 4
    assert prefetcher.dataset is loader.dataset  # loader attributes stay reachable
    for _epoch in range(3):
        batches = list(prefetcher)
        assert len(batches) == 4
        got = torch.cat([x for x, _ in batches])
        np.testing.assert_array_equal(got.numpy(), np.stack(images).transpose(0, 3, 1, 2))


def test_prefetcher_on_cpu_yields_the_very_same_objects():
    batches = [
        {"x": torch.zeros(2, 3), "y": torch.ones(2)},
        (torch.arange(3), "meta"),
        [torch.ones(1)],
    ]
    out = list(DevicePrefetcher(batches, torch.device("cpu")))
    assert all(a is b for a, b in zip(out, batches, strict=True))
    assert list(DevicePrefetcher([], "cpu")) == []


_ACCELERATOR = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None


def test_prefetcher_picks_cpu_when_no_accelerator():
    if _ACCELERATOR is not None:  # CUDA, or any other (PrivateUse1's openreg)
        pytest.skip("an accelerator is present")
    assert DevicePrefetcher([1, 2]).device == torch.device("cpu")


def test_prefetcher_picks_the_accelerator_when_there_is_one():
    if _ACCELERATOR is None:
        pytest.skip("needs an accelerator")
    assert DevicePrefetcher([1, 2]).device.type == _ACCELERATOR.type


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@gpu
def test_prefetcher_copies_to_cuda_on_one_stream_for_all_epochs():  # pragma: no cover - GPU
    images = hwc_images(9)
    loader = DataLoader(_ImageList(images), batch_size=3, collate_fn=uint8_collate, pin_memory=True)
    prefetcher = DevicePrefetcher(loader, "cuda")
    stream = prefetcher.stream
    assert stream is not None
    for _epoch in range(2):
        batches = list(prefetcher)
        assert prefetcher.stream is stream
        assert all(x.is_cuda and y.is_cuda for x, y in batches)
        got = torch.cat([x for x, _ in batches]).cpu()
        np.testing.assert_array_equal(got.numpy(), np.stack(images).transpose(0, 3, 1, 2))


@pytest.mark.gpu
@gpu
def test_normalize_runs_on_the_device():  # pragma: no cover - GPU
    x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8, device="cuda")
    out = Normalize(MEAN, STD).cuda()(x)
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), _reference(x.cpu()), rtol=1e-5, atol=1e-5)


def test_prefetcher_to_a_device_without_streams_moves_batches_plainly():
    batches = [(torch.zeros(2, 3), {"y": torch.ones(2)}, "tag")]
    prefetcher = DevicePrefetcher(batches, "meta")
    assert prefetcher.stream is None
    ((x, extra, tag),) = list(prefetcher)
    assert x.device.type == "meta" and extra["y"].device.type == "meta" and tag == "tag"
