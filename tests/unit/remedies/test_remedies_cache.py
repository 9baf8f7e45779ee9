"""The offline cache: build, read without copies, refuse damage, resume, concurrent builders."""

from __future__ import annotations

import ctypes
import functools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import torchdoctor
from paths import TESTS
from torchdoctor.cli import main as cli_main
from torchdoctor.remedies import (
    CachedDataset,
    CacheError,
    build_cache,
    cache_image_folder,
    uint8_collate,
)
from torchdoctor.remedies._sources import ImageOptions, preprocess_pil

#: Seconds each: left out of `make test-fast`.
pytestmark = pytest.mark.slow

HERE = TESTS


def make_folder(root: Path, per_class: int = 6, size=(40, 30)) -> Path:
    """Two classes of random images, PNG (lossless) and JPEG, sizes varying by a few pixels."""
    rng = np.random.default_rng(0)
    for name in ["zebra", "ant"]:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            array = rng.integers(0, 256, (size[1] + i, size[0] + 2 * i, 3), dtype=np.uint8)
            suffix = "png" if i % 2 == 0 else "jpg"
            Image.fromarray(array).save(root / name / f"img{i}.{suffix}")
    (root / "ant" / "notes.txt").write_text("not an image")
    return root


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(torchdoctor.__file__).parents[1])
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), src, env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


# --- building and reading ------------------------------------------------------------------


def test_image_folder_cache_holds_preprocessed_uint8_hwc_images(tmp_path):
    folder = make_folder(tmp_path / "images")
    manifest = build_cache(folder, tmp_path / "cache", size=16, progress=False)
    ds = CachedDataset(tmp_path / "cache")
    assert len(ds) == 12 and manifest["count"] == 12
    assert ds.classes == ["ant", "zebra"]
    assert manifest["image_layout"] == "HWC"
    files = sorted((folder).glob("*/*.*g"))
    for i, path in enumerate(files):
        image, label = ds[i]
        assert image.shape == (16, 16, 3) and image.dtype == np.uint8
        assert label == ds.classes.index(path.parent.name)
        with Image.open(path) as img:
            expected = preprocess_pil(img, ImageOptions(size=16))
        np.testing.assert_array_equal(image, expected)


def test_samples_are_views_of_the_mapped_file_not_copies(tmp_path):
    folder = make_folder(tmp_path / "images")
    build_cache(folder, tmp_path / "cache", size=16, progress=False)
    ds = CachedDataset(tmp_path / "cache")
    a, _ = ds[3]
    b, _ = ds[3]
    assert not a.flags.owndata
    assert np.shares_memory(a, b)  # both views of the same mapped pages
    a[0, 0, 0] ^= 0xFF  # a private mapping: a write never reaches the file
    assert CachedDataset(tmp_path / "cache").verify() == []


def test_variable_size_images_and_every_field_kind_round_trip(tmp_path):
    folder = make_folder(tmp_path / "images")
    build_cache(folder, tmp_path / "var", size=12, resize="shorter", progress=False)
    ds = CachedDataset(tmp_path / "var")
    shapes = {ds[i][0].shape for i in range(len(ds))}
    assert len(shapes) > 1 and all(min(s[:2]) == 12 for s in shapes)

    sys.path.insert(0, str(HERE))
    from cache_sources import MixedDataset

    build_cache("cache_sources:mixed", tmp_path / "mixed", progress=False)
    cached = CachedDataset(tmp_path / "mixed")
    source = MixedDataset()
    assert len(cached) == len(source)
    spec = {f["name"]: f for f in cached.manifest["fields"]}
    assert spec["tokens"]["shape"] is None and spec["tokens"]["dtype"] == "<u2"
    assert spec["features"]["shape"] == [4] and spec["label"]["dtype"] == "<i8"
    for i in (0, 1, 17, 49):
        got, want = cached[i], source[i]
        assert isinstance(got, dict)
        np.testing.assert_array_equal(got["tokens"], want["tokens"])
        np.testing.assert_array_equal(got["features"], want["features"])
        np.testing.assert_array_equal(got["mask"], want["mask"].numpy())
        assert int(got["label"]) == want["label"] and float(got["weight"]) == want["weight"]
        assert got["raw"].tobytes() == want["raw"]


def test_in_memory_mode_reads_everything_into_ram(tmp_path):
    folder = make_folder(tmp_path / "images")
    build_cache(folder, tmp_path / "cache", size=16, progress=False)
    mapped = CachedDataset(tmp_path / "cache")
    in_ram = CachedDataset(tmp_path / "cache", in_memory=True)
    for i in range(len(mapped)):
        np.testing.assert_array_equal(mapped[i][0], in_ram[i][0])
    (tmp_path / "cache" / "shard-00000.image.bin").unlink()  # RAM copy no longer needs it
    assert in_ram[5][0].shape == (16, 16, 3)


def test_format_is_json_and_raw_arrays_only(tmp_path):
    folder = make_folder(tmp_path / "images")
    build_cache(folder, tmp_path / "cache", size=8, progress=False)
    names = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert not (tmp_path / "cache" / "_build").exists()
    assert all(n in ("manifest.json", "index.bin", ".lock") or n.endswith(".bin") for n in names)
    manifest = json.loads((tmp_path / "cache" / "manifest.json").read_text())
    assert manifest["format"] == "torchdoctor-cache"
    assert manifest["source"]["fingerprint"] and manifest["index"]["sha256"]
    for name in names:
        assert not (tmp_path / "cache" / name).read_bytes().startswith(b"\x80")  # no pickle


def test_values_that_need_pickle_are_refused(tmp_path):
    with pytest.raises(CacheError, match="text"):
        build_cache("cache_sources:bad", tmp_path / "c", progress=False)
    with pytest.raises(CacheError, match="float64"):
        build_cache("cache_sources:varying_dtype", tmp_path / "d", progress=False)


def test_a_different_cache_at_dest_is_not_overwritten_silently(tmp_path):
    folder = make_folder(tmp_path / "images")
    build_cache(folder, tmp_path / "cache", size=8, progress=False)
    with pytest.raises(CacheError, match="another source"):
        build_cache(folder, tmp_path / "cache", size=10, progress=False)
    build_cache(folder, tmp_path / "cache", size=10, overwrite=True, progress=False)
    assert CachedDataset(tmp_path / "cache")[0][0].shape == (10, 10, 3)


def test_parallel_build_of_a_dataset_from_a_local_function(tmp_path):
    def numbers():
        class Numbers:
            def __len__(self):
                return 300

            def __getitem__(self, i):
                return {"x": np.full(3, i, dtype=np.int32)}

        return Numbers()

    build_cache(numbers, tmp_path / "cache", workers=2, shard_mb=0.0001, progress=False)
    ds = CachedDataset(tmp_path / "cache")
    assert len(ds.manifest["shards"]) > 2
    assert [int(ds[i]["x"][0]) for i in range(300)] == list(range(300))


def test_parallel_build_equals_inline_build(tmp_path):
    folder = make_folder(tmp_path / "images", per_class=40)
    build_cache(folder, tmp_path / "inline", size=8, workers=0, shard_mb=0.001, progress=False)
    build_cache(folder, tmp_path / "pool", size=8, workers=2, shard_mb=0.001, progress=False)
    inline, pool = CachedDataset(tmp_path / "inline"), CachedDataset(tmp_path / "pool")
    assert len(inline.manifest["shards"]) > 2
    for i in range(len(inline)):
        np.testing.assert_array_equal(inline[i][0], pool[i][0])
        assert inline[i][1] == pool[i][1]


# --- refusing damaged caches ---------------------------------------------------------------


@pytest.fixture
def built(tmp_path) -> Path:
    folder = make_folder(tmp_path / "images")
    build_cache(folder, tmp_path / "cache", size=16, shard_mb=0.001, progress=False)
    return tmp_path / "cache"


def test_truncated_shard_is_refused(built):
    shard = built / "shard-00000.image.bin"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(CacheError, match="truncated"):
        CachedDataset(built)


def test_changed_index_is_refused(built):
    index = built / "index.bin"
    data = bytearray(index.read_bytes())
    data[8] ^= 1
    index.write_bytes(bytes(data))
    with pytest.raises(CacheError, match="checksum"):
        CachedDataset(built)


def test_missing_or_garbled_manifest_is_refused(built):
    (built / "manifest.json").write_text("{not json")
    with pytest.raises(CacheError, match="not valid JSON"):
        CachedDataset(built)
    (built / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(CacheError, match="not a torchdoctor cache"):
        CachedDataset(built)
    (built / "manifest.json").unlink()
    with pytest.raises(CacheError, match="no torchdoctor cache"):
        CachedDataset(built)


def test_flipped_data_byte_is_found_by_verify(built, capsys):
    shard = built / "shard-00001.image.bin"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert CachedDataset(built).verify() == ["shard-00001.image.bin: checksum mismatch"]
    with pytest.raises(CacheError, match="damaged"):
        CachedDataset(built, verify=True)
    assert cli_main(["cache", "verify", str(built)]) == 2
    err = capsys.readouterr().err
    assert "torchdoctor: error:" in err and "fix:" in err and "Traceback" not in err


# --- interruption, resumption and concurrent builders --------------------------------------


def _markers(dest: Path) -> list[Path]:
    return sorted((dest / "_build").glob("shard-*.json")) if (dest / "_build").exists() else []


def _slow_settings(log: Path, count: int, delay_s: float) -> dict[str, str]:
    """The environment that configures ``cache_sources:slow``: ``count`` samples of ``delay_s``
    each, every index it serves logged to ``log``."""
    return {"TD_SLOW_COUNT": str(count), "TD_SLOW_DELAY_S": str(delay_s), "TD_SLOW_LOG": str(log)}


def _build_and_read(dest: Path, env: dict[str, str], count: int | None = None) -> None:
    """A forked builder's work: ``cache_sources:slow`` built at ``dest`` with ``env``'s
    settings, then, given ``count``, read whole."""
    os.environ.update(env)
    build_cache("cache_sources:slow", dest, workers=0, shard_mb=0.0001, progress=False)
    if count is not None:
        assert len(CachedDataset(dest)) == count


@pytest.mark.integration
def test_killed_build_is_refused_then_resumes_without_redoing_finished_shards(tmp_path):
    dest = tmp_path / "cache"
    log = tmp_path / "served.log"
    slow = _slow_settings(log, count=40, delay_s=0.05)
    # a forked builder (no new Python importing torch: 10.1 s of the test's 10.1 s beside other
    # tests), killed as any process can be
    child = multiprocessing.get_context("fork").Process(target=_build_and_read, args=(dest, slow))
    child.start()
    try:
        deadline = time.monotonic() + 120
        while len(_markers(dest)) < 8 and time.monotonic() < deadline:
            assert child.is_alive(), "the build ended before it could be interrupted"
            time.sleep(0.02)
        child.kill()
    finally:
        child.join()
    assert child.exitcode == -signal.SIGKILL
    finished = len(_markers(dest))
    assert 8 <= finished < 40
    with pytest.raises(CacheError, match="incomplete"):
        CachedDataset(dest)

    log.write_text("")
    os.environ.update(slow)
    try:
        build_cache("cache_sources:slow", dest, workers=0, shard_mb=0.0001, progress=False)
    finally:
        for key in slow:
            os.environ.pop(key)
    served = [int(line) for line in log.read_text().split()]
    fingerprint_reads = {0, 20, 39}
    rebuilt = set(served) - fingerprint_reads
    assert rebuilt and min(rebuilt) >= finished - 1  # shards before the kill were kept
    ds = CachedDataset(dest, verify=True)
    assert [int(ds[i][1]) for i in range(40)] == list(range(40))
    assert all(int(ds[i][0][0, 0, 0]) == i for i in range(40))


@pytest.mark.integration
def test_ctrl_c_stops_a_parallel_cli_build_which_then_resumes(tmp_path):
    dest = tmp_path / "cache"
    # 448 samples in 7 shards of 64; from the 4th shard on, samples wait for a gate the test
    # opens only to resume: Ctrl-C lands mid-build however the machine's load delays the
    # build or this test's polling (a timed build finished before its Ctrl-C in a full suite).
    gate = tmp_path / "gate"
    env = child_env(
        TD_SLOW_COUNT="448", TD_SLOW_DELAY_S="0.005", TD_SLOW_GATE=str(gate),
        TD_SLOW_GATE_FROM="192",
    )  # fmt: skip
    argv = [sys.executable, "-m", "torchdoctor", "cache", "build", "cache_sources:slow"]
    argv += [str(dest), "--workers", "2", "--quiet"]
    # Ctrl-C's default action in the child, even when this test runs where SIGINT is ignored
    # (a background job of a non-interactive shell): the child inherits an ignored SIGINT.
    child = subprocess.Popen(
        argv,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while len(_markers(dest)) < 2 and time.monotonic() < deadline:
            assert child.poll() is None, child.stderr.read()
            time.sleep(0.02)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    assert "torchdoctor: error: interrupted" in err
    finished = len(_markers(dest))
    assert 2 <= finished <= 3
    gate.touch()
    resumed = subprocess.run(argv[:-1], env=env, stderr=subprocess.PIPE, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {finished} of 7 shards already built" in resumed.stderr
    ds = CachedDataset(dest, verify=True)
    assert [int(ds[i][1]) for i in range(448)] == list(range(448))


@pytest.mark.integration
def test_processes_building_one_cache_at_once_build_it_once(tmp_path):
    dest = tmp_path / "cache"
    log = tmp_path / "served.log"
    slow = _slow_settings(log, count=30, delay_s=0.02)
    # Forked, not new Pythons: three processes racing for one cache all the same, without three
    # imports of torch (20.5 s of the test's 20.5 s beside other tests; the builds take 0.6 s).
    fork = multiprocessing.get_context("fork")
    children = [fork.Process(target=_build_and_read, args=(dest, slow, 30)) for _ in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=300)
    assert [c.exitcode for c in children] == [0, 0, 0]
    served = [int(line) for line in log.read_text().split()]
    fingerprint_reads = {0, 15, 29}
    built_indices = [i for i in served if i not in fingerprint_reads]
    assert sorted(built_indices) == sorted(set(range(30)) - fingerprint_reads)  # each once
    ds = CachedDataset(dest, verify=True)
    assert [int(ds[i][1]) for i in range(30)] == list(range(30))


# --- sharing between DataLoader workers ----------------------------------------------------


def _anon_rss_bytes(pid: int) -> int:
    """Private (anonymous) resident memory of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon")


class _MemoizingDataset:
    """The anti-pattern a RAM cache must avoid: each worker keeps its own copy of what it read."""

    def __init__(self, dataset: CachedDataset) -> None:
        self.dataset = dataset
        self.kept: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        image, label = self.dataset[i]
        self.kept[i] = image.copy()
        return image, label


def _has_malloc_trim() -> bool:
    return sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "malloc_trim")


def _release_free_heap() -> None:
    """Hand the free pages of every malloc arena back to the kernel (glibc's malloc_trim)."""
    ctypes.CDLL(None).malloc_trim(0)


def _note_memory_before_reading(notes: Path, worker_id: int) -> None:
    """worker_init_fn: release the free heap a forked worker inherits, then note its memory.

    A forked worker inherits its parent's free malloc chunks as resident pages, counted in its
    RssAnon already. After earlier tests the pytest process holds tens of MB of them (31 MB
    after test_memory's row lists are freed), enough for every copy a worker makes here:
    its RssAnon would stay flat while it grows. Once they are released, each byte the worker
    keeps is a newly resident page. Noting the baseline here, before the first sample is read,
    makes the growth independent of how far the workers got before the main process looks.
    """
    _release_free_heap()
    pid = os.getpid()
    (notes / f"{pid}.tmp").write_text(str(_anon_rss_bytes(pid)))
    os.replace(notes / f"{pid}.tmp", notes / str(pid))


def _worker_private_growth(dataset, notes: Path) -> tuple[int, int]:
    """Largest growth of a DataLoader worker's private memory over one pass, and samples seen.

    Growth runs from the worker's start (see :func:`_note_memory_before_reading`) to its
    memory after the main process received the last batch, when every worker has read its
    share. RssAnon counts memory the worker writes into new pages; pages it shares with the
    parent and dirties (copy-on-read) are tests/unit/loader/test_memory.py's subject.
    """
    notes.mkdir()
    loader = DataLoader(
        dataset,
        batch_size=50,
        shuffle=True,
        num_workers=2,
        collate_fn=uint8_collate,
        worker_init_fn=functools.partial(_note_memory_before_reading, notes),
    )
    me = psutil.Process()
    last: dict[int, int] = {}
    seen = 0
    for images_batch, labels in loader:
        assert images_batch.dtype == torch.uint8
        seen += len(labels)
        for child in me.children():
            try:
                last[child.pid] = _anon_rss_bytes(child.pid)
            except (FileNotFoundError, ProcessLookupError):
                continue
    first = {int(p.name): int(p.read_text()) for p in notes.iterdir() if p.name.isdigit()}
    assert len(first) == 2 and set(first) <= set(last), (first, last)
    return max(last[pid] - first[pid] for pid in first), seen


@pytest.mark.integration
@pytest.mark.skipif(not _has_malloc_trim(), reason="reads /proc, needs glibc's malloc_trim")
def test_dataloader_workers_do_not_grow_by_the_dataset_size(tmp_path):
    count, side = 1200, 96  # 1200 images of 96x96x3: 33 MB of pixels

    def images():
        class Images:
            def __len__(self):
                return count

            def __getitem__(self, i):
                rng = np.random.default_rng(i)
                return rng.integers(0, 256, (side, side, 3), dtype=np.uint8), i

        return Images()

    build_cache(images, tmp_path / "cache", progress=False)
    ds = CachedDataset(tmp_path / "cache")
    growth, seen = _worker_private_growth(ds, tmp_path / "plain")
    assert seen == count
    assert growth < 0.1 * ds.nbytes, f"a worker's private memory grew by {growth} bytes"
    # The same measurement sees the growth of per-worker copies (each worker reads ~half).
    copying_growth, _ = _worker_private_growth(_MemoizingDataset(ds), tmp_path / "copying")
    assert copying_growth > 0.25 * ds.nbytes, copying_growth


# --- helpers and command line --------------------------------------------------------------


def test_cache_image_folder_builds_once_then_reuses(tmp_path):
    folder = make_folder(tmp_path / "images")
    ds = cache_image_folder(folder, tmp_path / "cache", size=24)
    assert ds[0][0].shape == (24, 24, 3)
    stamp = (tmp_path / "cache" / "manifest.json").stat().st_mtime_ns
    again = cache_image_folder(folder, tmp_path / "cache", size=24)
    assert (tmp_path / "cache" / "manifest.json").stat().st_mtime_ns == stamp
    assert len(again) == len(ds)


def test_cli_build_info_verify(tmp_path, capsys):
    folder = make_folder(tmp_path / "images")
    dest = tmp_path / "cache"
    assert cli_main(["cache", "build", str(folder), str(dest), "--size", "20", "--quiet"]) == 0
    assert cli_main(["cache", "info", str(dest)]) == 0
    out = capsys.readouterr().out
    assert "samples    12" in out and "image: |u1 [20, 20, 3]" in out
    assert cli_main(["cache", "verify", str(dest)]) == 0
    assert "every checksum matches" in capsys.readouterr().out
    assert cli_main(["cache", "info", str(tmp_path / "nothing")]) == 2
    assert "no torchdoctor cache" in capsys.readouterr().err
    assert cli_main(["cache", "build", str(tmp_path / "nothing"), str(dest), "--quiet"]) == 2
    assert "no image folder" in capsys.readouterr().err


def test_demo_pipeline_trains_from_the_cache(tmp_path):
    """The fixed pipeline the demo uses: cache, uint8 batches, prefetcher, Normalize in the model."""
    from torchdoctor.remedies import DevicePrefetcher, Normalize

    folder = make_folder(tmp_path / "images", per_class=16, size=(64, 64))
    dataset = cache_image_folder(folder, tmp_path / "cache", size=32)
    loader = DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=uint8_collate)
    model = torch.nn.Sequential(
        Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 2),
    )
    steps = 0
    for _epoch in range(2):
        for images, labels in DevicePrefetcher(loader, "cpu"):
            assert images.dtype == torch.uint8 and images.shape == (8, 3, 32, 32)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            model.zero_grad()
            loss.backward()
            with torch.no_grad():  # plain SGD; torch.optim's first use imports torch._dynamo
                for param in model.parameters():
                    param -= 0.1 * param.grad
            steps += 1
    assert steps == 8 and torch.isfinite(loss)


def test_encoded_cache_keeps_file_bytes_and_decodes_on_read(tmp_path):
    folder = make_folder(tmp_path / "images")
    manifest = build_cache(folder, tmp_path / "enc", encoded=True, progress=False)
    assert manifest["image_layout"] == "encoded"
    files = sorted(folder.glob("*/*.*g"))
    assert manifest["fields"][0]["bytes"] == sum(p.stat().st_size for p in files)
    for in_memory in (False, True):
        ds = CachedDataset(tmp_path / "enc", in_memory=in_memory)
        for i, path in enumerate(files):
            image, label = ds[i]
            with Image.open(path) as img:
                np.testing.assert_array_equal(image, np.asarray(img.convert("RGB")))
            assert label == ds.classes.index(path.parent.name)
    raw, _ = CachedDataset(tmp_path / "enc", decode=False)[0]
    assert raw.tobytes() == files[0].read_bytes()
    with pytest.raises(CacheError, match="cannot resize"):
        build_cache(folder, tmp_path / "bad", encoded=True, size=8, progress=False)
