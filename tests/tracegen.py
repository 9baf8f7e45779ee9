"""Build small Kineto-shaped traces for tests (and the large one of benchmarks/trace_parse.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID, TID, DEVICE, STREAM = 100, 101, 0, 7

#: How each Kineto category is written in each spelling the builder knows (unlisted: unchanged).
#: "new" is what PyTorch 2.x writes. "old" is the PyTorch 1.8-1.9 Kineto output: capitalised
#: names, record_function labels (ProfilerStep#N, the DataLoader's) written as operators, and GPU
#: rows on a "stream N" thread. "labels_as_ops" keeps the new names but writes the labels as
#: ``cpu_op``, as some releases before ``user_annotation`` existed did.
SPELLINGS: dict[str, dict[str, str]] = {
    "new": {},
    "old": {
        "cpu_op": "Operator",
        "user_annotation": "Operator",
        "cuda_runtime": "Runtime",
        "kernel": "Kernel",
        "gpu_memcpy": "Memcpy",
        "gpu_memset": "Memset",
    },
    "labels_as_ops": {"user_annotation": "cpu_op"},
}
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


def respell(events: list[dict[str, Any]], spelling: str) -> list[dict[str, Any]]:
    """Copies of Kineto ``events`` (written in the new spelling) as ``spelling`` writes them."""
    names = SPELLINGS[spelling]
    out = []
    for ev in events:
        ev = dict(ev)
        cat = ev.get("cat")
        if isinstance(cat, str) and cat in names:
            ev["cat"] = names[cat]
        if spelling == "old" and cat in _GPU_CATS and "stream" in (ev.get("args") or {}):
            ev["tid"] = f"stream {ev['args']['stream']}"
        out.append(ev)
    return out


class TraceBuilder:
    """Append events with Kineto's field names; times in microseconds.

    Events are kept in the new spelling; ``spelling`` (a key of :data:`SPELLINGS`) says how
    :meth:`document` writes them.
    """

    def __init__(self, rank: int | None = 0, world_size: int = 1, spelling: str = "new") -> None:
        if spelling not in SPELLINGS:
            raise ValueError(f"spelling {spelling!r}: expected one of {sorted(SPELLINGS)}")
        self.spelling = spelling
        self.events: list[dict[str, Any]] = []
        self.meta: dict[str, Any] = {"schemaVersion": 1}
        if rank is not None:
            self.meta["distributedInfo"] = {"rank": rank, "world_size": world_size}
        self._corr = 1000

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = TID, **args):
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": dict(args),
            }
        )

    def step(self, n: int, ts: float, dur: float) -> None:
        self.host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")

    def launch(
        self,
        name: str,
        ts: float,
        dur: float,
        kernel: str,
        k_ts: float,
        k_dur: float,
        cat: str = "kernel",
        **kargs,
    ) -> None:
        """A runtime call on the host and the GPU event it launched, linked by correlation."""
        self._corr += 1
        self.host(name, ts, dur, cat="cuda_runtime", correlation=self._corr)
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": kernel,
                "pid": DEVICE,
                "tid": STREAM,
                "ts": k_ts,
                "dur": k_dur,
                "args": {"stream": STREAM, "correlation": self._corr, **kargs},
            }
        )

    def python(self, frame: str, ts: float, dur: float) -> None:
        self.host(frame, ts, dur, cat="python_function")

    def document(self) -> dict[str, Any]:
        events = respell(self.events, self.spelling)
        return {**self.meta, "traceEvents": events, "traceName": "test"}

    def write(self, path: Path) -> Path:
        data = json.dumps(self.document()).encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path


def training_trace(
    rank: int | None = 0,
    steps: int = 3,
    gpu_busy: bool = True,
    loader_us: float = 0.0,
    spelling: str = "new",
    loader_iter: str = "_SingleProcessDataLoaderIter",
    loader_cat: str = "user_annotation",
) -> TraceBuilder:
    """Steps of 1000 us: optional DataLoader fetch, then launches of 10 kernels.

    With ``gpu_busy`` each kernel runs 95 us back to back (the GPU is the bound); without it
    each runs 5 us and the host spends the rest of the step in Python. ``loader_iter`` names
    the DataLoader's iterator class in its label, ``loader_cat`` the label's category.
    """
    b = TraceBuilder(rank, spelling=spelling)
    for s in range(steps):
        t0 = 10_000 + s * 1000.0
        b.step(s + 1, t0, 1000.0)
        t = t0
        if loader_us:
            b.host(f"enumerate(DataLoader)#{loader_iter}.__next__", t, loader_us, cat=loader_cat)
            t += loader_us
        k_t = t + 10
        for k in range(10):
            b.host("aten::mul", t + k * 5, 4)
            b.launch(
                "cudaLaunchKernel", t + k * 5, 3, f"gemm_kernel_{k}", k_t, 95.0 if gpu_busy else 5.0
            )
            k_t += 95.0 if gpu_busy else 50.0
    return b


def respell_file(source: Path, target: Path, spelling: str) -> Path:
    """Write the trace at ``source`` (``.json`` or ``.json.gz``) to ``target`` in ``spelling``."""
    raw = source.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    doc["traceEvents"] = respell(doc["traceEvents"], spelling)
    target.write_text(json.dumps(doc))
    return target


def ddp_trace(
    rank: int,
    world_size: int = 2,
    loader_us: float = 0.0,
    slowest_loader_us: float = 0.0,
    steps: int = 4,
    comm_us: float = 200.0,
) -> TraceBuilder:
    """One rank of a data-parallel job in lockstep: each step loads a batch, runs 5 compute
    kernels of 100 us, then an NCCL all-reduce that cannot finish before the slowest rank's.

    ``loader_us`` is this rank's DataLoader time per step, ``slowest_loader_us`` the largest of
    any rank's. Every rank's all-reduce ends ``comm_us`` after the slowest rank's compute, so a
    faster rank spends the difference waiting inside its all-reduce kernel, and every rank's
    step is ``slowest_loader_us + 600 + comm_us`` us long.
    """
    b = TraceBuilder(rank, world_size=world_size)
    slowest = max(loader_us, slowest_loader_us)
    wall = slowest + 600.0 + comm_us
    for s in range(steps):
        t0 = 10_000 + s * wall
        b.step(s + 1, t0, wall)
        t = t0
        if loader_us:
            b.host(
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                t,
                loader_us,
                cat="user_annotation",
            )
            t += loader_us
        k_t = t + 10
        for k in range(5):
            b.host("aten::mm", t + k * 5, 4)
            b.launch("cudaLaunchKernel", t + k * 5, 3, f"gemm_kernel_{k}", k_t, 100.0)
            k_t += 100.0
        comm_end = t0 + slowest + 10 + 500 + comm_us
        b.launch(
            "cudaLaunchKernel",
            t + 30,
            3,
            "ncclKernel_AllReduce_RING_LL_Sum_float",
            k_t,
            comm_end - k_t,
        )
    return b
