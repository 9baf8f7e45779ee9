"""Parse speed (MB/s of uncompressed JSON) and peak RSS of trace readers, side by side.

Generates a Kineto-shaped trace of the requested size in /tmp (never in the repo), then runs each
reader in a fresh child process so its peak RSS is its own:

- ``json.load``     : the whole file loaded at once (what HTA's default JSON backend does);
- ``ijson-yajl2_c`` : ijson's C backend streaming ``traceEvents.item`` (if ijson is installed);
- ``stream``        : torchdoctor's streaming reader, events only (no tables);
- ``load_trace``    : torchdoctor's reader building the per-rank column tables;
- ``analyze``       : load_trace plus every analysis and the verdict (the whole ``analyze``);
- ``hta``           : HolisticTraceAnalysis's ``TraceAnalysis`` of the trace and its temporal
  breakdown, in the Python ``--hta-python`` names (one with HolisticTraceAnalysis installed; by
  default this one), when that Python has it. ``analyze`` and ``hta`` both print the GPU idle
  share they found, and, when both ran, their ratios.

With ``--ranks N`` it writes a folder of N rank files of that size each and analyses the folder
three ways: every rank's tables held at once (``analyze_parsed_traces``, how ``analyze`` read a
folder before), a file at a time in one process (``--jobs 1``), and in worker processes (the
default). Peak RSS is the analysing process's own and the largest worker's.

Usage::

    .venv/bin/python benchmarks/trace_parse.py --size-mb 1024
    .venv/bin/python benchmarks/trace_parse.py --size-mb 100 --readers stream,load_trace
    .venv/bin/python benchmarks/trace_parse.py --size-mb 100 --ranks 4
    .venv/bin/python benchmarks/trace_parse.py --size-mb 300 --readers analyze,hta \
        --hta-python /tmp/htavenv/bin/python   # pip install HolisticTraceAnalysis there
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

READERS = ("json.load", "ijson-yajl2_c", "stream", "load_trace", "analyze", "hta")
FOLDER_READERS = ("all-at-once", "jobs-1", "workers")


def generate(path: Path, size_mb: float, rank: int = 0, world_size: int = 1) -> int:
    """Write a trace of about ``size_mb`` MB: steps of host ops, launches, kernels, stacks."""
    target = int(size_mb * 1e6)
    written = 0
    corr = 0
    ts = 1_700_000_000_000_000
    step = 0
    with open(path, "w", encoding="utf-8") as fh:
        head = (
            f'{{"schemaVersion": 1, "distributedInfo": {{"rank": {rank}, '
            f'"world_size": {world_size}}},\n'
        )
        head += '"deviceProperties": [{"id": 0, "name": "Synthetic GPU"}],\n"traceEvents": [\n'
        fh.write(head)
        written += len(head)
        first = True
        while written < target:
            step += 1
            parts = [
                f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", '
                f'"pid": 1, "tid": 1, "ts": {ts}, "dur": 20000, "args": {{"External id": {step}}}}}'
            ]
            t = ts
            for i in range(400):
                corr += 1
                parts.append(
                    f'{{"ph": "X", "cat": "python_function", "name": "train.py({i % 90}): step", '
                    f'"pid": 1, "tid": 1, "ts": {t}, "dur": 40, '
                    f'"args": {{"Python parent id": {i}, "Python id": {i + 1}}}}}'
                )
                parts.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, '
                    f'"ts": {t + 1}, "dur": 30, "args": {{"External id": {corr}, '
                    f'"Sequence number": {corr}, "Fwd thread id": 0, "Record function id": 0}}}}'
                )
                parts.append(
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, '
                    f'"tid": 1, "ts": {t + 5}, "dur": 6, '
                    f'"args": {{"External id": {corr}, "cbid": 211, "correlation": {corr}}}}}'
                )
                parts.append(
                    f'{{"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float, 128, 64>'
                    f'(float const*, float*, int)", "pid": 0, "tid": 7, "ts": {t + 12}, '
                    f'"dur": 35, "args": {{"External id": {corr}, "queued": 0, "device": 0, '
                    f'"context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 72, '
                    f'"shared memory": 16384, "blocks per SM": 1.2, "warps per SM": 9.6, '
                    f'"grid": [128, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 18}}}}'
                )
                parts.append(
                    f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {t + 12}, '
                    f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}'
                )
                t += 50
            ts += 20000
            text = (",\n" if not first else "") + ",\n".join(parts)
            first = False
            fh.write(text)
            written += len(text)
        tail = '\n], "traceName": "synthetic"}\n'
        fh.write(tail)
        written += len(tail)
    return written


def measure(reader: str, path: Path) -> dict[str, float]:
    """Run one reader over ``path`` in this process; return seconds, events, peak RSS."""
    started = time.perf_counter()
    events = 0
    idle_pct = None
    if reader == "json.load":
        with open(path, "rb") as fh:
            events = len(json.load(fh)["traceEvents"])
    elif reader == "ijson-yajl2_c":
        import ijson

        if ijson.backend != "yajl2_c":
            raise SystemExit(f"ijson backend is {ijson.backend}, not yajl2_c")
        with open(path, "rb") as fh:
            for _ in ijson.items(fh, "traceEvents.item", use_float=True):
                events += 1
    elif reader == "stream":
        from torchdoctor.trace import iter_events

        for _ in iter_events(path):
            events += 1
    elif reader == "load_trace":
        from torchdoctor.trace import load_trace

        events = len(load_trace(path))
    elif reader == "analyze":
        from torchdoctor.analysis.trace_analysis import analyze_trace

        record = analyze_trace(str(path))
        events = record.trace.ranks[0].events
        temporal = record.trace.ranks[0].temporal
        idle_pct = temporal.idle_pct if temporal else None
    elif reader == "hta":
        import tempfile

        try:
            from hta.trace_analysis import TraceAnalysis
        except ImportError:
            raise SystemExit(
                "HolisticTraceAnalysis is not installed in this Python: pass --hta-python"
            ) from None

        with tempfile.TemporaryDirectory() as folder:  # HTA reads a folder of rank files
            os.symlink(path.resolve(), Path(folder) / "rank0.json")
            analysis = TraceAnalysis(trace_dir=folder)
            breakdown = analysis.get_temporal_breakdown(visualize=False)
            events = len(analysis.t.get_trace(0))
            idle_pct = float(breakdown["idle_time_pctg"].iloc[0])
    elif reader in FOLDER_READERS:
        from torchdoctor.analysis.trace_analysis import analyze_parsed_traces, analyze_trace
        from torchdoctor.trace import find_trace_files, load_trace

        if reader == "all-at-once":
            traces = [load_trace(f) for f in find_trace_files([str(path)])]
            record = analyze_parsed_traces(traces)
        else:
            record = analyze_trace(str(path), jobs=1 if reader == "jobs-1" else None)
        events = sum(r.events for r in record.trace.ranks)
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "seconds": seconds,
        "events": events,
        "peak_rss_mb": peak_mb,
        "worker_mb": worker_mb,
        "idle_pct": idle_pct,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024)
    parser.add_argument("--path", type=Path, default=None, help="reuse or write this trace")
    parser.add_argument("--readers", default=None)
    parser.add_argument("--ranks", type=int, default=0, help="a folder of this many rank files")
    parser.add_argument(
        "--hta-python",
        default=sys.executable,
        help="the Python that runs the hta reader (HolisticTraceAnalysis installed)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        print(json.dumps(measure(args.child, args.path)))
        return

    bench = Path("/tmp/torchdoctor-bench")
    if args.ranks:
        path = args.path or bench / f"ranks_{args.ranks}x{int(args.size_mb)}MB"
        path.mkdir(parents=True, exist_ok=True)
        for rank in range(args.ranks):
            if not (path / f"rank{rank}.json").exists():
                generate(path / f"rank{rank}.json", args.size_mb, rank, args.ranks)
        size_mb = sum(f.stat().st_size for f in path.glob("*.json")) / 1e6
        print(f"folder: {path} ({args.ranks} ranks, {size_mb:.0f} MB uncompressed JSON)")
        readers = args.readers.split(",") if args.readers else list(FOLDER_READERS)
    else:
        path = args.path or bench / f"trace_{int(args.size_mb)}MB.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            t0 = time.perf_counter()
            generate(path, args.size_mb)
            print(f"generated {path} in {time.perf_counter() - t0:.1f} s")
        size_mb = path.stat().st_size / 1e6
        print(f"trace: {path} ({size_mb:.0f} MB uncompressed JSON)")
        readers = args.readers.split(",") if args.readers else list(READERS)
    print(
        f"{'reader':<16}{'seconds':>9}{'MB/s':>8}{'events':>11}{'peak RSS MB':>13}{'worker MB':>11}"
        f"{'GPU idle %':>12}"
    )
    results = {}
    for reader in readers:
        python = args.hta_python if reader == "hta" else sys.executable
        proc = subprocess.run(
            [python, __file__, "--child", reader, "--path", str(path)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
            print(f"{reader:<16} failed: {last}")
            continue
        r = results[reader] = json.loads(proc.stdout.strip().splitlines()[-1])
        idle = f"{r['idle_pct']:>12.1f}" if r.get("idle_pct") is not None else ""
        print(
            f"{reader:<16}{r['seconds']:>9.1f}{size_mb / r['seconds']:>8.1f}"
            f"{r['events']:>11,}{r['peak_rss_mb']:>13,.0f}{r['worker_mb']:>11,.0f}{idle}"
        )
    if "analyze" in results and "hta" in results:
        ours, hta = results["analyze"], results["hta"]
        print(
            f"analyze against HTA, this run: {hta['seconds'] / ours['seconds']:.1f}x faster, "
            f"{hta['peak_rss_mb'] / ours['peak_rss_mb']:.1f}x less peak RSS"
        )


if __name__ == "__main__":
    main()
