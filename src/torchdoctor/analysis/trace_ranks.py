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

The files are shared among the workers before they start, largest first to the least loaded,
so a worker's start (a fresh interpreter and its imports, about 0.15 s) is paid once per worker,
not per file; below :data:`WORKERS_FROM_MB` of JSON in all no worker is started. A worker is a
fresh interpreter that imports the trace reader and the analyses (torch-free) with the current
directory left off its path, never a fork of a process that may hold threads; it writes each
file's result to a temporary folder as it goes, and ends when the process that started it is
gone. A file without a result (its worker could not start, was killed, ran out of memory) is
analysed in this process, and the record's notes say so; on any ending of this one the workers
still running are killed.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..record import RankReport
from ..trace import end_with, end_workers, start_worker, worker_code

#: Peak memory of one file's analysis beyond the interpreter's, at most, as a multiple of its
#: JSON's size (a 300 MB trace peaked at 117 MB, 17 of them the interpreter's:
#: ``benchmarks/trace_parse.py``; a test holds it), plus a worker's interpreter and imports.
MEMORY_PER_MB_OF_TRACE = 0.5
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
    #: Said in the record's notes: why the file was analysed here and not in its worker.
    note: str = ""


def analyse_file(
    path: str, include_last_step: bool, n_step_names: int | None, split: bool | None = False
) -> FileResult:
    """Parse and analyse one trace file; ``n_step_names`` ``None`` counts the file's own;
    ``split`` as :func:`~torchdoctor.trace.load_trace` takes it."""
    from ..trace import TraceFormatError, load_trace
    from .trace_analysis import analyse_rank
    from .trace_gpu import step_names

    try:
        trace = load_trace(path, split=split)
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
        with open(path, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
    except OSError:  # unreadable: the file is skipped with its reason when it is analysed
        return WORKER_MB
    return WORKER_MB + MEMORY_PER_MB_OF_TRACE * size * (GZIP_RATIO if gz else 1.0)


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
    paths: Sequence[str],
    include_last_step: bool = False,
    workers: int = 1,
    split: bool | None = False,
) -> tuple[list[FileResult], set[str]]:
    """Every file's result, in the order given, and the step names of them all (the module's
    docstring); ``workers`` above one runs them in that many processes. A file analysed in this
    process is read in two parts at once when ``split`` (``None``: when it pays) and no other
    worker runs (:mod:`~torchdoctor.trace._split`)."""
    results = _run(paths, include_last_step, [None] * len(paths), workers, split)
    names = set().union(*(r.step_names for r in results))
    again = [
        i
        for i, r in enumerate(results)
        if r.report is not None and (len(r.step_names) >= 2) != (len(names) >= 2)
    ]
    if again:
        redone = _run([paths[i] for i in again], include_last_step, [len(names)] * len(again),
                      workers, split)  # fmt: skip
        for i, r in zip(again, redone, strict=True):
            results[i] = r
    return results, names


def _run(
    paths: Sequence[str],
    include_last_step: bool,
    counts: list[int | None],
    workers: int,
    split: bool | None,
) -> list[FileResult]:
    work = [estimate_mb(p) - WORKER_MB for p in paths]
    if workers <= 1 or len(paths) <= 1 or sum(work) < WORKERS_FROM_MB:
        return [analyse_file(p, include_last_step, c, split)
                for p, c in zip(paths, counts, strict=True)]  # fmt: skip
    results: list[FileResult | None] = [None] * len(paths)
    why: dict[int, str] = {}
    with tempfile.TemporaryDirectory(prefix="torchdoctor-analyze-") as out:
        running: list[tuple[subprocess.Popen[bytes], list[int]]] = []
        try:
            for batch in _batches(work, min(workers, len(paths))):
                jobs_file = Path(out, f"batch{batch[0]}.json")
                jobs_file.write_text(json.dumps([[i, paths[i], counts[i]] for i in batch]))
                try:
                    running.append((_start(jobs_file, include_last_step, Path(out)), batch))
                except OSError as exc:
                    why.update(
                        (i, f"no worker process could start ({exc.strerror})") for i in batch
                    )
            for proc, batch in running:
                while proc.poll() is None:
                    time.sleep(POLL_S)
                for i in batch:
                    results[i] = _read(Path(out, f"{i}"))
                    if results[i] is None:
                        why[i] = (
                            f"its worker process ended without a result (status {proc.returncode})"
                        )
        finally:
            end_workers(p for p, _ in running)
    # a file without a result (its worker did not start, was killed, ran out of memory): here
    done = []
    for i, (r, p, c) in enumerate(zip(results, paths, counts, strict=True)):
        if r is None:
            r = analyse_file(p, include_last_step, c)
            r.note = f"{p}: {why.get(i, 'no result from its worker')}; analysed in this process"
        done.append(r)
    return done


def _batches(work: Sequence[float], n: int) -> list[list[int]]:
    """The files shared among ``n`` workers, largest first to the least loaded; each worker's
    files in their given order."""
    load = [0.0] * n
    batches: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(work)), key=lambda i: -work[i]):
        k = load.index(min(load))
        batches[k].append(i)
        load[k] += max(work[i], 0.0)
    return [sorted(b) for b in batches if b]


#: How often the parent looks for workers that ended, in seconds.
POLL_S = 0.02

#: Below this much JSON in all (MB) the files are analysed in this process: a worker's start
#: (an interpreter and its imports, about 0.15 s) would cost more than it saves (40 files of
#: 1.75 MB each: 2.2 s in one process, 7.2 s with a worker a file).
WORKERS_FROM_MB = 20.0

#: A worker's line (:func:`~torchdoctor.trace.worker_code`).
_WORKER_CODE = worker_code("torchdoctor.analysis.trace_ranks", "_worker")


def _start(jobs_file: Path, include_last_step: bool, out: Path) -> subprocess.Popen[bytes]:
    return start_worker(_WORKER_CODE, [str(jobs_file), str(int(include_last_step)), str(out)])


def _read(out: Path) -> FileResult | None:
    try:
        with open(out, "rb") as fh:
            result = pickle.load(fh)
    except Exception:  # noqa: BLE001 - no result: the file is analysed in this process
        return None
    return result if isinstance(result, FileResult) else None


def _worker(argv: list[str]) -> None:
    """A worker process: each file of its batch (``argv[0]``, a JSON list of ``[index, path,
    step-name count]``) analysed in turn, its :class:`FileResult` pickled whole to ``argv[2]``
    as ``<index>``. It ends when the process that started it (``argv[3]``) is gone."""
    jobs_file, last, out, parent = argv
    end_with(int(parent))
    for i, path, count in json.loads(Path(jobs_file).read_text()):
        result = analyse_file(path, last == "1", count)
        partial = Path(out, f"{i}.partial")
        with open(partial, "wb") as fh:
            pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, Path(out, f"{i}"))
