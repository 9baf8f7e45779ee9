"""The collectives torch's parallel code issues (``capture._issued``): told from the script's
own by the caller's file, counted by kind and bytes, and timed where the step waits for them."""

from __future__ import annotations

import os

import torch

from torchdoctor.capture._frames import _TORCH_DIR
from torchdoctor.capture._issued import IssuedCollectives, issued_by_torch, timed_wait


def test_fsdp2s_files_issue_collectives_and_the_users_and_ddps_do_not():
    fsdp = os.path.join(_TORCH_DIR, "distributed", "fsdp", "_fully_shard", "_fsdp_collectives.py")
    assert issued_by_torch(fsdp)
    assert issued_by_torch(os.path.join(_TORCH_DIR, "distributed", "tensor", "_redistribute.py"))
    assert not issued_by_torch(os.path.join(_TORCH_DIR, "nn", "parallel", "distributed.py"))
    assert not issued_by_torch(os.path.join(_TORCH_DIR, "distributed", "algorithms", "join.py"))
    assert not issued_by_torch(__file__)


class _Work:
    """A work object as an asynchronous collective returns one."""

    def wait(self) -> bool:
        return True


def test_calls_are_counted_by_kind_and_their_largest_buffer():
    issued = IssuedCollectives()
    out, shard = torch.zeros(64), torch.zeros(32)

    def gather(*tensors, group=None, async_op=False, **named):
        return _Work() if async_op else None

    issued.step_ended(measuring=True)  # a measured step before any call: no figure
    assert issued.step_ms == []
    for _ in range(2):
        issued.call("all_gather_single", gather, (out, shard), {})
    issued.call("reduce_scatter_single", gather, (), {"output": shard, "input": out})
    issued.step_ended(measuring=True)
    issued.step_ended(measuring=False)  # warmup, or another phase: not kept
    issued.step_ended(measuring=True)  # a measured step without a call still has its figure
    assert len(issued.step_ms) == 2 and issued.step_ms[1] == 0.0
    per_step = issued.per_step()
    assert per_step["all_gather"]["calls"] == 1.0 and per_step["all_gather"]["bytes"] == 256
    assert per_step["reduce_scatter"] == {
        "calls": 0.5, "bytes": 128, "ms": per_step["reduce_scatter"]["ms"]}  # fmt: skip


def test_an_asynchronous_call_is_timed_where_it_is_waited_for():
    issued = IssuedCollectives()
    wait = timed_wait(issued, _Work.wait)
    work = issued.call("all_gather_single", lambda *a, **k: _Work(), (torch.zeros(4),),
                       {"async_op": True})  # fmt: skip
    assert issued._step_ns == 0 and issued._pending  # not yet: the call only queued it
    other = _Work()
    wait(other)  # a work of someone else's: not ours to count
    assert issued._pending
    assert wait(work) is True
    assert not issued._pending and issued._step["all_gather"].calls == 1
    issued.step_ended(measuring=True)
    assert issued.step_ms[0] == round(issued.kinds["all_gather"].ns / 1e6, 4)
