"""Caches on an S3-compatible object store: a real moto server on 127.0.0.1, not a mocked client."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

from test_remedies_cache import make_folder  # noqa: E402

from torchdoctor.cli import main as cli_main  # noqa: E402
from torchdoctor.remedies import CachedDataset, CacheError, build_cache  # noqa: E402

#: Seconds each: left out of `make test-fast`.
pytestmark = pytest.mark.slow

KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(scope="module")
def s3_endpoint():
    """An S3 server on a free loopback port for this module; stopped (and joined) at the end."""
    import s3fs

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()


@pytest.fixture
def s3(s3_endpoint, monkeypatch, tmp_path):
    """Storage options for the server, a fresh bucket, and no real AWS configuration in reach."""
    import s3fs

    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("TORCHDOCTOR_CACHE_DIR", str(tmp_path / "td-cache"))
    options = {
        "key": KEYS["AWS_ACCESS_KEY_ID"],
        "secret": KEYS["AWS_SECRET_ACCESS_KEY"],
        "client_kwargs": {"endpoint_url": s3_endpoint, "region_name": "eu-west-1"},
    }
    fs = s3fs.S3FileSystem(**options)
    bucket = f"bucket-{tmp_path.name.lower().replace('_', '-')[-40:]}"
    fs.mkdir(bucket)
    fs.invalidate_cache()
    yield options, fs, bucket
    s3fs.S3FileSystem.clear_instance_cache()


def _same_samples(a: CachedDataset, b: CachedDataset) -> None:
    assert len(a) == len(b)
    for i in range(len(a)):
        np.testing.assert_array_equal(a[i][0], b[i][0])
        assert a[i][1] == b[i][1]


def test_build_from_and_to_s3_matches_a_local_build(s3, tmp_path):
    options, fs, bucket = s3
    folder = make_folder(tmp_path / "images")
    fs.put(str(folder), f"{bucket}/images", recursive=True)
    build_cache(
        f"s3://{bucket}/images",
        f"s3://{bucket}/cache",
        size=16,
        shard_mb=0.001,
        storage_options=options,
        source_storage_options=options,
        progress=False,
    )
    names = {p.rsplit("/", 1)[-1] for p in fs.find(f"{bucket}/cache")}
    assert "manifest.json" in names and "index.bin" in names
    assert not any(p.startswith("_build") for p in names)
    remote = CachedDataset(f"s3://{bucket}/cache", storage_options=options)
    build_cache(folder, tmp_path / "local", size=16, shard_mb=0.001, progress=False)
    _same_samples(remote, CachedDataset(tmp_path / "local"))
    assert str(remote.local_dir).startswith(str(tmp_path / "td-cache"))

    # The local copy serves later opens even when the shards are gone from the store.
    for path in fs.find(f"{bucket}/cache"):
        if path.endswith(".bin") and "shard-" in path:
            fs.rm(path)
    _same_samples(CachedDataset(f"s3://{bucket}/cache", storage_options=options), remote)


def test_parallel_build_to_s3(s3, tmp_path):
    options, fs, bucket = s3
    folder = make_folder(tmp_path / "images", per_class=20)
    build_cache(
        folder,
        f"s3://{bucket}/pool",
        size=8,
        workers=2,
        shard_mb=0.001,
        storage_options=options,
        progress=False,
    )
    build_cache(folder, tmp_path / "local", size=8, workers=0, shard_mb=0.001, progress=False)
    remote = CachedDataset(f"s3://{bucket}/pool", storage_options=options, verify=True)
    _same_samples(remote, CachedDataset(tmp_path / "local"))


def test_damaged_or_partial_remote_cache_is_refused(s3, tmp_path):
    options, fs, bucket = s3
    folder = make_folder(tmp_path / "images")
    url = f"s3://{bucket}/cache"
    build_cache(folder, url, size=16, storage_options=options, progress=False)
    shard = f"{bucket}/cache/shard-00000.image.bin"
    data = bytearray(fs.cat_file(shard))
    data[7] ^= 0xFF
    fs.pipe_file(shard, bytes(data))
    with pytest.raises(CacheError, match="checksum"):
        CachedDataset(url, storage_options=options, cache_dir=tmp_path / "fresh")
    assert not list((tmp_path / "fresh").glob("*/shard-*"))  # nothing unverified kept

    fs.rm(f"{bucket}/cache/manifest.json")
    fs.pipe_file(f"{bucket}/cache/_build/shard-00000.json", json.dumps({}).encode())
    fs.invalidate_cache()
    with pytest.raises(CacheError, match="incomplete"):
        CachedDataset(url, storage_options=options, cache_dir=tmp_path / "fresh2")


def test_cli_reads_s3_through_the_standard_aws_environment(
    s3, s3_endpoint, tmp_path, capsys, monkeypatch
):
    options, fs, bucket = s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    folder = make_folder(tmp_path / "images")
    url = f"s3://{bucket}/cli"
    assert cli_main(["cache", "build", str(folder), url, "--size", "8", "--quiet"]) == 0
    assert cli_main(["cache", "info", url]) == 0
    assert "samples    12" in capsys.readouterr().out
    assert cli_main(["cache", "verify", url]) == 0
    assert Path(tmp_path / "td-cache").exists()
