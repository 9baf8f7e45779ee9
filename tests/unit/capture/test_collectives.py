"""The script's own collectives: timed when its code calls them, free in the no-sync phase, and
every wrapper undone (gloo, one process: the calls are real)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist

from torchdoctor.capture._collectives import CollectiveWatch
from torchdoctor.capture._patch import Patcher


@pytest.fixture
def group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(name, None)


def test_the_scripts_calls_are_timed_made_free_and_unpatched(group):
    originals = (dist.all_reduce, dist.distributed_c10d.all_reduce, dist.barrier)
    patcher = Patcher()
    watch = CollectiveWatch()
    watch.install(patcher)
    try:
        assert dist.all_reduce is not originals[0]
        t = torch.ones(3)
        dist.all_reduce(t)  # this test's own line: the user's code
        watch.step_ended(measuring=True)
        assert watch.calls == 1 and watch.measured_calls == 1 and watch.step_ms[0] > 0
        (where,) = watch.sites
        assert where.endswith("test_collectives.py:" + str(_line_of("dist.all_reduce(t)")))
        watch.free = True
        calls = watch.calls
        assert dist.all_reduce(t) is None and watch.calls == calls, "free: returns at once"
        dist.all_gather([torch.zeros(3)], t)  # its output is read: not freeable
        assert watch.not_freeable == {"all_gather"} and not watch.freeable
    finally:
        patcher.restore()
    assert (dist.all_reduce, dist.distributed_c10d.all_reduce, dist.barrier) == originals


def _line_of(text: str) -> int:
    lines = open(__file__, encoding="utf-8").read().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "_line_of" not in line)
