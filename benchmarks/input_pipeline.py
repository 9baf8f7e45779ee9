"""Input pipeline, measured side by side in one run: decode per sample vs the cache vs memcpy.

    python benchmarks/input_pipeline.py            # 3000 JPEG photos of ~100k pixels, 2 workers

The photographs are scikit-image's bundled sample images (astronaut, coffee, chelsea, rocket,
hubble_deep_field, immunohistochemistry, retina, camera, moon, coins; no download needed),
randomly cropped, resized to about 100k pixels and saved as JPEG (quality 90): one class per
source photo. Three pipelines feed the same images at --size pixels (default 224) to the main
process:

  (a) decode:  PIL decode + resize + centre crop + normalise per sample, DataLoader, 2 workers
  (b) cache:   CachedDataset + uint8_collate + Normalize (in the main process), 2 workers
  (c) memcpy:  one plain copy of the same uint8 bytes in the main process: this machine's limit

Under (b), variants show what each part costs: "before" is the pipeline as it was before
batched reads (the DataLoader calls ds[i] per sample, as for a Dataset without __getitems__)
one-pass Normalize (cast the whole batch, then one multiply-add pass over it) and worker
batches in shared memory faulted in page by page as they are written; "uint8"
lines stop at the uint8 batch a GPU would receive; "num_workers=0" lines read in the main
process; the `file_system` line sends batches between processes by shared-memory file name
instead of torch's default file descriptors.

Timing starts at the first batch (worker start-up is excluded) and covers one shuffled pass.
Needs `pip install 'torchdoctor[bench]'` (Pillow, fsspec, scikit-image).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import time
from pathlib import Path

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset

from torchdoctor.remedies import CachedDataset, Normalize, _collate, build_cache, uint8_collate

PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "camera",
    "moon",
    "coins",
)
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
PIXELS_PER_IMAGE = 100_000


def make_photos(folder: Path, count: int, seed: int = 0) -> None:
    """Write ``count`` JPEG crops of scikit-image's sample photographs, one class per photo."""
    import skimage.data
    from PIL import Image

    rng = np.random.default_rng(seed)
    sources = []
    for name in PHOTOS:
        array = getattr(skimage.data, name)()
        image = Image.fromarray(array).convert("RGB")
        sources.append((name, image))
        (folder / name).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        name, image = sources[i % len(sources)]
        width, height = image.size
        aspect = rng.uniform(0.75, 1.33)
        area = rng.uniform(0.3, 1.0) * width * height
        crop_w = int(min(width, np.sqrt(area * aspect)))
        crop_h = int(min(height, np.sqrt(area / aspect)))
        left = int(rng.integers(0, width - crop_w + 1))
        top = int(rng.integers(0, height - crop_h + 1))
        crop = image.crop((left, top, left + crop_w, top + crop_h))
        scale = np.sqrt(PIXELS_PER_IMAGE / (crop_w * crop_h))
        crop = crop.resize(
            (round(crop_w * scale), round(crop_h * scale)), Image.Resampling.BILINEAR
        )
        if rng.random() < 0.5:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        crop.save(folder / name / f"{i:05d}.jpg", quality=90)


class DecodeDataset(Dataset):
    """The classic per-sample pipeline: decode, resize, crop, to float, normalise."""

    def __init__(self, folder: Path, size: int) -> None:
        self.files = sorted(folder.glob("*/*.jpg"))
        classes = sorted({p.parent.name for p in self.files})
        self.labels = [classes.index(p.parent.name) for p in self.files]
        self.size = size
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        from PIL import Image

        with Image.open(self.files[index]) as img:
            img = img.convert("RGB")
            width, height = img.size
            scale = self.size / min(width, height)
            img = img.resize(
                (max(self.size, round(width * scale)), max(self.size, round(height * scale))),
                Image.Resampling.BILINEAR,
            )
            left = (img.size[0] - self.size) // 2
            top = (img.size[1] - self.size) // 2
            img = img.crop((left, top, left + self.size, top + self.size))
            array = np.asarray(img)
        image = torch.from_numpy(array.copy()).permute(2, 0, 1).float().div_(255)
        return (image - self.mean) / self.std, self.labels[index]


class PerSampleReads(Dataset):
    """The cache read the way it was before ``__getitems__``: the DataLoader calls ds[i]."""

    def __init__(self, dataset: CachedDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset[index]


class OnePassNormalize(Normalize):
    """Normalize as it was before blocked casting: cast the whole batch, then scale it."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out = images.to(dtype=self.dtype, copy=True)
        n, c, h, w = out.shape
        rows = out.permute(0, 2, 3, 1).view(n * h, w * c)
        row_scale, row_shift = self._row_operands(self.scale, self.shift, w)
        torch.addcmul(row_shift, rows, row_scale, out=rows)
        return out


@contextlib.contextmanager
def unpopulated_batches():
    """Shared-memory batches faulted in page by page, as before ``_collate._populate``."""
    saved = _collate._madvise
    _collate._madvise = False
    try:
        yield
    finally:
        _collate._madvise = saved


def images_per_s(loader: DataLoader, normalize: Normalize | None = None, limit: int | None = None):
    """Images per second over one pass, timed from the first batch (worker start-up excluded)."""
    count = 0
    started = None
    for images, _labels in loader:
        if normalize is not None:
            images = normalize(images)
        if started is None:
            started = time.perf_counter()
            continue
        count += images.shape[0]
        if limit is not None and count >= limit:
            break
    return count / (time.perf_counter() - started)


def cpu_ms_per_batch(loader: DataLoader, normalize: Normalize | None = None) -> tuple[float, float]:
    """CPU time per batch of the main process and of the workers over one pass (psutil)."""
    me = psutil.Process()
    iterator = iter(loader)
    next(iterator)  # workers started
    workers = me.children()
    main_before = sum(me.cpu_times()[:2])
    workers_before = sum(sum(w.cpu_times()[:2]) for w in workers)
    # All but the first and last batch: after the last one the workers exit and their CPU
    # counters go with them.
    batches = len(loader) - 2
    for _ in range(batches):
        images, _labels = next(iterator)
        if normalize is not None:
            normalize(images)
    workers_cpu = sum(sum(w.cpu_times()[:2]) for w in workers) - workers_before
    main_cpu = sum(me.cpu_times()[:2]) - main_before
    del iterator
    return 1e3 * main_cpu / batches, 1e3 * workers_cpu / batches


def memcpy_images_per_s(dataset: CachedDataset, batch_size: int, repeats: int = 3) -> float:
    """One plain copy of the cache's image bytes, batch by batch, into a reused buffer."""
    dataset[0]  # map the shards
    blocks = [shard["image"] for shard in dataset._shards]
    count = sum(len(b) for b in blocks)
    buffer = np.empty((batch_size, *blocks[0].shape[1:]), dtype=np.uint8)
    best = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        for block in blocks:
            for start in range(0, len(block), batch_size):
                part = block[start : start + batch_size]
                np.copyto(buffer[: len(part)], part)
        best = max(best, count / (time.perf_counter() - started))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--size", type=int, default=224, help="training resolution in pixels")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--decode-limit", type=int, default=600, help="images timed for (a)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in the main process")
    parser.add_argument("--workdir", default="/tmp/torchdoctor-bench")
    parser.add_argument("--fresh", action="store_true", help="regenerate photos and cache")
    args = parser.parse_args()

    workdir = Path(args.workdir)
    photos = workdir / f"photos-{args.images}"
    cache = workdir / f"cache-{args.images}-{args.size}"
    if args.fresh:
        shutil.rmtree(workdir, ignore_errors=True)
    if not photos.exists():
        tmp = photos.with_name(photos.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        make_photos(tmp, args.images)
        os.replace(tmp, photos)
    jpeg_bytes = sum(p.stat().st_size for p in photos.glob("*/*.jpg"))
    print(
        f"photos: {args.images} JPEGs, {jpeg_bytes / args.images / 1024:.0f} KiB each, in {photos}"
    )

    started = time.perf_counter()
    build_cache(photos, cache, size=args.size, workers=args.workers, overwrite=True, progress=False)
    build_s = time.perf_counter() - started
    dataset = CachedDataset(cache)
    print(f"cache: {cache} ({dataset.nbytes / 2**20:.0f} MiB), built or checked in {build_s:.1f} s")

    def loader(ds: Dataset, **kwargs) -> DataLoader:
        return DataLoader(
            ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, **kwargs
        )

    # One torch thread in the main process: with 2 workers on 2 cores, a second OpenMP thread
    # in the main process oversubscribes the cores (Normalize ran 811 vs 1325 images/s, 2 vs 1).
    torch.set_num_threads(args.threads)
    normalize = Normalize(MEAN, STD)
    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    before_normalize = OnePassNormalize(MEAN, STD)
    per_sample = PerSampleReads(dataset)

    def cached_rate(ds: Dataset, norm: Normalize | None, workers: int | None = None) -> float:
        workers = args.workers if workers is None else workers
        # before: new shared-memory batches were faulted in page by page
        populate = unpopulated_batches() if ds is per_sample else contextlib.nullcontext()
        with populate:
            return images_per_s(
                DataLoader(
                    ds,
                    batch_size=args.batch_size,
                    shuffle=True,
                    num_workers=workers,
                    collate_fn=uint8_collate,
                ),
                norm,
            )

    def file_system_sharing() -> float:
        strategy = torch.multiprocessing.get_sharing_strategy()
        torch.multiprocessing.set_sharing_strategy("file_system")
        try:
            return cached_rate(dataset, None)
        finally:
            torch.multiprocessing.set_sharing_strategy(strategy)

    pipelines = {
        "decode": lambda: images_per_s(
            loader(DecodeDataset(photos, args.size)), limit=args.decode_limit
        ),
        "cached": lambda: cached_rate(dataset, normalize),
        "cached_before": lambda: cached_rate(per_sample, before_normalize),
        "inline": lambda: cached_rate(dataset, normalize, 0),
        "inline_before": lambda: cached_rate(per_sample, before_normalize, 0),
        "uint8": lambda: cached_rate(dataset, None),
        "uint8_before": lambda: cached_rate(per_sample, None),
        "uint8_inline": lambda: cached_rate(dataset, None, 0),
        "uint8_inline_before": lambda: cached_rate(per_sample, None, 0),
        "uint8_file_system": file_system_sharing,
        "memcpy": lambda: memcpy_images_per_s(dataset, args.batch_size),
    }
    # Rounds interleave the pipelines, so a burst of load from other jobs hits all of them;
    # the median of each is reported.
    rates: dict[str, list[float]] = {name: [] for name in pipelines}
    for _round in range(args.rounds):
        for name, measure in pipelines.items():
            rates[name].append(measure())
    load_after = os.getloadavg()[0]
    median = {name: float(np.median(values)) for name, values in rates.items()}

    def line(label: str, name: str) -> str:
        values = rates[name]
        return f"  {label:46s} {median[name]:8.0f}   ({min(values):.0f}-{max(values):.0f})"

    print(
        f"\nimages/s at {args.size}x{args.size}, batch {args.batch_size}, {args.workers} workers, "
        f"{torch.get_num_threads()} torch thread(s) in the main process; median of "
        f"{args.rounds} interleaved rounds (range); load average {load_before:.1f} -> "
        f"{load_after:.1f} on {os.cpu_count()} CPUs"
    )
    print(line("(a) decode + resize + normalise per sample", "decode"))
    print(line("(b) CachedDataset + uint8_collate + Normalize", "cached"))
    print(line("    before (per-sample reads, one-pass Normalize)", "cached_before"))
    print(line("    num_workers=0", "inline"))
    print(line("    num_workers=0, before", "inline_before"))
    print(line("    uint8 left for the GPU", "uint8"))
    print(line("    uint8 left for the GPU, before", "uint8_before"))
    print(line("    uint8, num_workers=0", "uint8_inline"))
    print(line("    uint8, num_workers=0, before", "uint8_inline_before"))
    print(line("    uint8, sharing strategy file_system", "uint8_file_system"))
    print(line("(c) plain memory copy of the same bytes", "memcpy"))
    cached, decode, memcpy = median["cached"], median["decode"], median["memcpy"]
    print(f"  b/a = {cached / decode:5.1f}x   (goal >= 10x)")
    print(f"  b/c = {cached / memcpy:5.0%}    (goal >= 50%)")
    before = median["cached_before"]
    print(f"  before: b/a = {before / decode:5.1f}x, b/c = {before / memcpy:.0%}")
    ms_per_batch = {name: 1e3 * args.batch_size / median[name] for name in median}
    print(
        f"  per batch: uint8 with {args.workers} workers {ms_per_batch['uint8']:.1f} ms, "
        f"in the main process {ms_per_batch['uint8_inline']:.1f} ms; Normalize adds "
        f"{ms_per_batch['inline'] - ms_per_batch['uint8_inline']:.1f} ms in the main process"
    )
    loaders = {
        "uint8, 0 workers": (0, None),
        f"uint8, {args.workers} workers": (args.workers, None),
        f"(b), {args.workers} workers": (args.workers, normalize),
    }
    for label, (workers, norm) in loaders.items():
        cpu = [
            cpu_ms_per_batch(
                DataLoader(
                    dataset,
                    batch_size=args.batch_size,
                    shuffle=True,
                    num_workers=workers,
                    collate_fn=uint8_collate,
                ),
                norm,
            )
            for _ in range(args.rounds)
        ]
        main_ms, workers_ms = np.median(np.asarray(cpu), axis=0)
        print(
            f"  CPU per batch, {label:18s} main process {main_ms:5.1f} ms, "
            f"workers {workers_ms:5.1f} ms (median of {args.rounds} passes)"
        )


if __name__ == "__main__":
    main()
