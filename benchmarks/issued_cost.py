"""What timing one collective FSDP2 issues costs the training thread (``capture/_issued.py``).

A launched rank's ``torch.distributed`` functions are wrapped: a call from torch's parallel code
(FSDP2's all-gathers and reduce-scatters) is classified by its caller's file, counted by kind and
bytes, and timed on the host clock. This measures that wrapper's own work per call on the thread's
CPU clock (which load does not move), against calling the same function directly, in
alternating rounds in one process. The function called does nothing: the figure is the wrapper's
cost alone. A caller in torch's FSDP folder is made by compiling the calling code under a file
name there.

    PYTHONPATH=src python benchmarks/issued_cost.py [--calls 20000] [--rounds 7]

It prints the median µs per call of each, their difference, and that difference times the calls
a step of the 7-layer FSDP2 MLP makes (21) beside that step's measured 53.8 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from torchdoctor.capture._collectives import CollectiveWatch
from torchdoctor.capture._frames import _TORCH_DIR

#: The FSDP2 MLP of docs/distributed.md: 14 all-gathers and 7 reduce-scatters a 53.8 ms step.
CALLS_PER_STEP, STEP_MS = 21, 53.8


def _caller(fn):
    """``fn(out, shard)`` called from a function whose file is in torch's FSDP folder."""
    where = os.path.join(_TORCH_DIR, "distributed", "fsdp", "_fully_shard", "_bench.py")
    namespace: dict = {}
    code = "def call(fn, out, shard, n):\n    for _ in range(n):\n        fn(out, shard)\n"
    exec(compile(code, where, "exec"), namespace)  # noqa: S102 - our own two lines
    return namespace["call"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    def all_gather_single(output, input, group=None, async_op=False):  # noqa: A002 - torch's name
        return None

    watch = CollectiveWatch()
    wrapped = watch._wrap("all_gather_single", all_gather_single)
    out, shard = torch.zeros(1024), torch.zeros(512)
    call = _caller(None)
    plain_us, wrapped_us = [], []
    for _ in range(args.rounds):
        for fn, into in ((all_gather_single, plain_us), (wrapped, wrapped_us)):
            start = time.thread_time_ns()
            call(fn, out, shard, args.calls)
            into.append((time.thread_time_ns() - start) / args.calls / 1e3)
    assert watch.issued._step["all_gather"].calls == args.calls * args.rounds  # it did count
    plain, timed = statistics.median(plain_us), statistics.median(wrapped_us)
    per_step = (timed - plain) * CALLS_PER_STEP
    print(f"direct call        {plain:.2f} µs a call (thread CPU, median of {args.rounds} rounds)")
    print(f"through the watch  {timed:.2f} µs a call")
    print(f"the watch's cost   {timed - plain:.2f} µs a call; x{CALLS_PER_STEP} calls a step: "
          f"{per_step:.0f} µs, {per_step / 1e3 / STEP_MS:.2%} of the FSDP2 MLP's {STEP_MS} ms step")  # fmt: skip


if __name__ == "__main__":
    main()
