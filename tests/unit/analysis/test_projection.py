"""A job's step projected to more ranks (``analysis.projection``): the cost model's formulas,
the links, and a job's projection from its measured collectives."""

from __future__ import annotations

import math

import pytest

from jobgen import rank_record
from torchdoctor.analysis.distributed import combine
from torchdoctor.analysis.projection import LINKS, Link, collective_ms, parse_link, project

LINK = Link("test link", gbps=80, latency_us=10)  # 10 GB/s


def test_a_ring_all_gather_sends_each_shard_once_around_the_ring():
    ms, how = collective_ms("all_gather", 8e6, 8, LINK)
    assert how == "ring"
    assert ms == pytest.approx(7 * (10e-6 + 1e6 / 10e9) * 1e3)
    assert collective_ms("reduce_scatter", 8e6, 8, LINK)[0] == pytest.approx(ms)
    assert collective_ms("all_gather", 8e6, 1, LINK) == (0.0, "none")


def test_an_all_reduce_takes_the_faster_of_ring_and_tree():
    # large and few ranks: the ring's bandwidth term wins
    ms, how = collective_ms("all_reduce", 100e6, 4, LINK)
    assert how == "ring" and ms == pytest.approx(2 * 3 * (10e-6 + 25e6 / 10e9) * 1e3)
    # small at scale: the ring's 2 (N - 1) latencies lose to the tree's 2 log2 N
    ms, how = collective_ms("all_reduce", 1e4, 512, LINK)
    assert how == "tree"
    assert ms == pytest.approx((2 * math.log2(512) * 10e-6 + 2 * 1e4 / 10e9) * 1e3)


def test_links_by_name_or_given():
    assert parse_link("ethernet") is LINKS["ethernet"]
    given = parse_link("200:8")
    assert (given.gbps, given.latency_us) == (200, 8)
    for bad in ("fast", "200", "0:5", "x:y"):
        with pytest.raises(ValueError, match="nvlink, infiniband, ethernet"):
            parse_link(bad)


def _sharded_job():
    ranks = [rank_record(0, 0.1, 30.0, None), rank_record(1, 0.1, 30.0, None)]
    for r in ranks:
        r.torch_collectives = [30.0] * 10
        r.torch_collective_kinds = {
            "all_gather": {"calls": 14.0, "bytes": 14 * 8e5, "ms": 18.0},
            "reduce_scatter": {"calls": 7.0, "bytes": 7 * 8e5, "ms": 12.0},
        }
    return combine(ranks)


def test_a_sharded_jobs_step_is_its_own_work_and_its_collectives_over_n_ranks():
    job = _sharded_job()
    p = job.distributed.projection
    assert p is not None and p.link.startswith("InfiniBand")  # the stated default
    own = job.distributed.ranks[0].own_ms
    assert p.own_ms == pytest.approx(own, abs=1e-3)
    assert p.collectives == ["all-gather 14 x 800.0 kB", "reduce-scatter 7 x 800.0 kB"]
    assert [s.ranks for s in p.scales] == [8, 64, 512]
    for s in p.scales:
        comm = 21 * collective_ms("all_gather", 8e5, s.ranks, LINKS["infiniband"])[0]
        assert s.comm_ms == pytest.approx(comm, abs=1e-3)
        assert s.step_ms == pytest.approx(own + comm, abs=2e-3)
    shares = [s.comm_share for s in p.scales]
    assert shares == sorted(shares) and shares[0] > 0
    assert any("nothing overlaps" in a for a in p.assumptions)


def test_a_ddp_jobs_all_reduce_is_one_call_per_bucket_of_its_gradients():
    ranks = [rank_record(0, 0.1, 30.0, 5.0), rank_record(1, 0.1, 30.0, 5.0)]
    for r in ranks:
        r.seen.update(ddp_grad_bytes=60 * 2**20, ddp_bucket_cap_mb=25.0)
    p = combine(ranks).distributed.projection
    assert p.collectives == [f"all-reduce 3 x {20 * 2**20 / 1e6:.1f} MB"]
    link = parse_link("200:8")
    assert project(combine(ranks), link).link.startswith("200:8 (given)")
    # nothing known of its collectives: no projection
    assert (
        combine(
            [rank_record(0, 0.1, 30.0, 5.0), rank_record(1, 0.1, 30.0, 5.0)]
        ).distributed.projection
        is None
    )
