"""A folder of rank files analysed a file at a time, in worker processes across the cores.

Each file is parsed, analysed (:func:`~torchdoctor.analysis.trace_analysis.analyse_rank`) and
let go before the next one in its process: what is kept is its
:class:`~torchdoctor.record.RankReport` (kilobytes), never its tables. So memory grows with the
largest file, not with the number of ranks, and with :func:`jobs` processes it is that many
files' worth at once.

One figure crosses files: how many distinct ``ProfilerStep`` names the traces hold together
(two or more, and the last step is left out of the GPU view, as HTA does). Each file is first
analysed with its own names; a file whose own count falls on the other side of two than the
union's is analysed again with the union's (ranks of one job name their steps alike, so this is
rare).

Each worker is a fresh interpreter (``python -m torchdoctor.analysis.trace_ranks``) that imports
the trace reader and the analyses (torch-free), never a fork of a process that may hold threads,
and leaves no helper process behind; it writes its result to a file in a temporary folder. A
worker that ends without one (killed, out of memory) has its file analysed in this process; on
any ending of this one, the workers still running are killed.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..record import RankReport

#: Peak memory of one file's analysis, as a multiple of its JSON's size (1 GB of JSON peaked at
#: 933 MB; ``benchmarks/trace_parse.py``), plus a worker's interpreter and imports.
MEMORY_PER_MB = 1.0
WORKER_MB = 60.0
#: A ``.json.gz`` file's JSON, as a multiple of its compressed size (Kineto traces compress
#: about 8-15x; the larger figure keeps the estimate on the safe side).
GZIP_RATIO = 15.0


@dataclass
class FileResult:
    """One file's analysis, or why it could not be read."""

    path: str
    report: RankReport | None = None
    error: tuple[str, str | None] | None = None  # a TraceFormatError's message and hint
    step_names: set[str] = field(default_factory=set)


def analyse_file(path: str, include_last_step: bool, n_step_names: int | None) -> FileResult:
    """Parse and analyse one trace file; ``n_step_names`` ``None`` counts the file's own."""
    from ..trace import TraceFormatError, load_trace
    from .trace_analysis import analyse_rank
    from .trace_gpu import step_names

    try:
        trace = load_trace(path)
    except TraceFormatError as exc:
        return FileResult(path, error=(exc.message, exc.hint))
    names = step_names([trace])
    count = len(names) if n_step_names is None else n_step_names
    return FileResult(path, analyse_rank(trace, count, include_last_step), step_names=names)


def jobs(paths: Sequence[str], asked: int | None = None) -> int:
    """How many worker processes: ``asked``, else one per usable core, no more than the files,
    and no more than the memory now available holds (the largest file's estimate each)."""
    if asked is not None:
        return max(1, min(asked, len(paths)))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = max(1, min(cores or 1, len(paths)))
    free = _available_mb()
    if free is not None and paths:
        each = max(estimate_mb(p) for p in paths)
        n = max(1, min(n, int(free // each)))
    return n


def estimate_mb(path: str) -> float:
    """The peak memory one file's analysis is expected to need, in MB."""
    try:
        size = Path(path).stat().st_size / 1e6
    except OSError:
        return WORKER_MB
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return WORKER_MB + MEMORY_PER_MB * size * (GZIP_RATIO if gz else 1.0)


def _available_mb() -> float | None:
    """``MemAvailable`` of ``/proc/meminfo``, in MB; ``None`` where it is not read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError, IndexError):
        return None
    return None


def analyse_files(
    paths: Sequence[str], include_last_step: bool = False, workers: int = 1
) -> tuple[list[FileResult], set[str]]:
    """Every file's result, in the order given, and the step names of them all (the module's
    docstring); ``workers`` above one runs them in that many processes."""
    results = _run(paths, include_last_step, [None] * len(paths), workers)
    names = set().union(*(r.step_names for r in results))
    again = [
        i
        for i, r in enumerate(results)
        if r.report is not None and (len(r.step_names) >= 2) != (len(names) >= 2)
    ]
    if again:
        redone = _run([paths[i] for i in again], include_last_step, [len(names)] * len(again),
                      workers)  # fmt: skip
        for i, r in zip(again, redone, strict=True):
            results[i] = r
    return results, names


def _run(
    paths: Sequence[str], include_last_step: bool, counts: list[int | None], workers: int
) -> list[FileResult]:
    if workers <= 1 or len(paths) <= 1:
        return [analyse_file(p, include_last_step, c) for p, c in zip(paths, counts, strict=True)]
    results: list[FileResult | None] = [None] * len(paths)
    waiting = list(range(len(paths)))
    running: dict[int, subprocess.Popen[bytes]] = {}
    with tempfile.TemporaryDirectory(prefix="torchdoctor-analyze-") as out:
        try:
            while waiting or running:
                while waiting and len(running) < workers:
                    i = waiting.pop(0)
                    running[i] = _start(paths[i], include_last_step, counts[i], Path(out, f"{i}"))
                for i, proc in list(running.items()):
                    if proc.poll() is not None:
                        del running[i]
                        results[i] = _read(Path(out, f"{i}"))
                time.sleep(POLL_S)
        finally:
            for proc in running.values():
                proc.kill()
                proc.wait()
    # a worker that ended without its result (killed, out of memory): that file in this process
    return [
        r if r is not None else analyse_file(p, include_last_step, c)
        for r, p, c in zip(results, paths, counts, strict=True)
    ]


#: How often the parent looks for workers that ended, in seconds.
POLL_S = 0.02


def _start(
    path: str, include_last_step: bool, count: int | None, out: Path
) -> subprocess.Popen[bytes]:
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (src, env.get("PYTHONPATH")) if x)
    argv = [sys.executable, "-m", __name__, path, str(int(include_last_step)),
            "-" if count is None else str(count), str(out)]  # fmt: skip
    return subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _read(out: Path) -> FileResult | None:
    try:
        with open(out, "rb") as fh:
            result = pickle.load(fh)
    except Exception:  # noqa: BLE001 - no result: the file is analysed in this process
        return None
    return result if isinstance(result, FileResult) else None


def _worker(argv: list[str]) -> None:
    """A worker process: one file's :class:`FileResult`, pickled whole to ``argv[3]``."""
    path, last, count, out = argv
    result = analyse_file(path, last == "1", None if count == "-" else int(count))
    partial = f"{out}.partial"
    with open(partial, "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(partial, out)


if __name__ == "__main__":
    # this module's own name, so the result pickles as torchdoctor's class, not __main__'s
    from torchdoctor.analysis.trace_ranks import _worker as worker

    worker(sys.argv[1:])
