"""Build small Kineto-shaped traces for tests (and the large one of benchmarks/trace_parse.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID, TID, DEVICE, STREAM = 100, 101, 0, 7


class TraceBuilder:
    """Append events with Kineto's field names; times in microseconds."""

    def __init__(self, rank: int | None = 0, world_size: int = 1) -> None:
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
        return {**self.meta, "traceEvents": self.events, "traceName": "test"}

    def write(self, path: Path) -> Path:
        data = json.dumps(self.document()).encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path


def training_trace(
    rank: int | None = 0, steps: int = 3, gpu_busy: bool = True, loader_us: float = 0.0
) -> TraceBuilder:
    """Steps of 1000 us: optional DataLoader fetch, then launches of 10 kernels.

    With ``gpu_busy`` each kernel runs 95 us back to back (the GPU is the bound); without it
    each runs 5 us and the host spends the rest of the step in Python.
    """
    b = TraceBuilder(rank)
    for s in range(steps):
        t0 = 10_000 + s * 1000.0
        b.step(s + 1, t0, 1000.0)
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
        for k in range(10):
            b.host("aten::mul", t + k * 5, 4)
            b.launch(
                "cudaLaunchKernel", t + k * 5, 3, f"gemm_kernel_{k}", k_t, 95.0 if gpu_busy else 5.0
            )
            k_t += 95.0 if gpu_busy else 50.0
    return b
