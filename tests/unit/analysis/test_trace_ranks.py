"""A folder of rank files analysed a file at a time, in worker processes
(``analysis.trace_ranks``): the same record as one process gives, whatever the workers do."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from torchdoctor.analysis import trace_ranks
from torchdoctor.analysis.trace_analysis import analyse_rank, analyze_trace
from torchdoctor.cli import main
from torchdoctor.trace import load_trace
from tracegen import TraceBuilder, ddp_trace


def _folder(tmp_path, loaders_us=(0.0, 400.0, 100.0)):
    tmp_path.mkdir(exist_ok=True)
    for rank, loader in enumerate(loaders_us):
        ddp_trace(rank, len(loaders_us), loader, max(loaders_us)).write(tmp_path / f"r{rank}.json")
    (tmp_path / "r9.json").write_text('{"traceEvents": [{"ph": "X", "na')  # cut short
    return tmp_path


def _ranks(record):
    """The ranks' reports without the parse's own seconds (they differ run to run)."""
    return [dataclasses.replace(r, parse=None) for r in record.trace.ranks]


@pytest.fixture
def small_is_enough(monkeypatch):
    """Workers even for these small files (below WORKERS_FROM_MB they are analysed here)."""
    monkeypatch.setattr(trace_ranks, "WORKERS_FROM_MB", 0.0)


def test_workers_give_the_record_one_process_gives(tmp_path, small_is_enough):
    folder = _folder(tmp_path)
    alone = analyze_trace([str(folder)], jobs=1)
    workers = analyze_trace([str(folder)], jobs=3)
    assert [r.label for r in workers.trace.ranks] == ["rank 0", "rank 1", "rank 2"]
    assert _ranks(workers) == _ranks(alone)
    assert workers.trace.skew == alone.trace.skew and workers.trace.skew.straggler_rank == "rank 1"
    assert workers.verdict == alone.verdict
    assert workers.notes == alone.notes and workers.notes[0].startswith("skipped ")
    assert "r9.json" in workers.notes[0]


def test_a_worker_that_ends_without_its_result_has_its_files_analysed_here(
    tmp_path, monkeypatch, small_is_enough
):
    folder = _folder(tmp_path)
    alone = analyze_trace([str(folder)], jobs=1)
    started = []

    def dies(jobs_file, *_):
        started.append(jobs_file)
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    monkeypatch.setattr(trace_ranks, "_start", dies)
    record = analyze_trace([str(folder)], jobs=2)
    assert len(started) == 2  # the four files in two workers' batches
    assert _ranks(record) == _ranks(alone)
    said = [n for n in record.notes if "worker process" in n]
    assert len(said) == 4 and all(
        n.endswith(": its worker process ended without a result (status 3); analysed in this "
                   "process") for n in said
    )  # fmt: skip


def test_a_worker_that_cannot_start_has_its_files_analysed_here(
    tmp_path, monkeypatch, small_is_enough
):
    folder = _folder(tmp_path)

    def refused(*_):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(trace_ranks, "_start", refused)
    record = analyze_trace([str(folder)], jobs=2)
    assert len(record.trace.ranks) == 3
    assert "no worker process could start (Resource temporarily unavailable)" in record.notes[-1]


def test_a_small_folder_is_analysed_here_without_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_ranks, "_start", lambda *_: pytest.fail("a worker was started"))
    record = analyze_trace([str(_folder(tmp_path))], jobs=2)
    assert len(record.trace.ranks) == 3


def test_workers_do_not_import_the_modules_of_the_current_directory(
    tmp_path, monkeypatch, small_is_enough
):
    folder = _folder(tmp_path / "traces")
    here = tmp_path / "project"
    here.mkdir()
    marker = tmp_path / "imported"
    for module in ("json", "pickle", "tokenize"):
        (here / f"{module}.py").write_text(f"open({str(marker)!r}, 'a').write('{module}')\n")
    monkeypatch.chdir(here)
    monkeypatch.setenv("PYTHONPATH", os.pathsep + os.environ.get("PYTHONPATH", "") + ":.")
    record = analyze_trace([str(folder)], jobs=2)
    assert not marker.exists()
    assert not [n for n in record.notes if "worker process" in n]


def test_a_worker_whose_parent_is_gone_ends_without_working(tmp_path):
    jobs_file = tmp_path / "batch.json"
    trace = ddp_trace(0, 1, 0.0, 0.0).write(tmp_path / "r0.json")
    jobs_file.write_text(f'[[0, "{trace}", null]]')
    not_parent = 1 if os.getppid() != 1 else 2
    done = subprocess.run(
        [sys.executable, "-c", trace_ranks._WORKER_CODE, str(jobs_file), "0", str(tmp_path),
         str(not_parent)],
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and not (tmp_path / "0").exists()
    done = subprocess.run(
        [sys.executable, "-c", trace_ranks._WORKER_CODE, str(jobs_file), "0", str(tmp_path),
         str(os.getpid())],
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and (tmp_path / "0").exists()


def test_the_files_are_shared_largest_first_to_the_least_loaded():
    assert trace_ranks._batches([10.0, 1.0, 8.0, 3.0, 2.0], 2) == [[0, 4], [1, 2, 3]]  # 12 each
    assert trace_ranks._batches([1.0, 1.0], 4) == [[0], [1]]


def test_an_unreadable_file_is_estimated_and_left_for_the_analysis_to_name(tmp_path):
    assert trace_ranks.estimate_mb(str(tmp_path)) == trace_ranks.WORKER_MB  # a folder: no open


def test_the_api_refuses_jobs_that_are_not_a_count(tmp_path):
    folder = _folder(tmp_path)
    for bad in (0, -5, 2.5, "2", True):
        with pytest.raises(ValueError, match="expected a number of processes, 1 or more"):
            analyze_trace([str(folder)], jobs=bad)


def test_a_rank_with_one_step_is_analysed_with_the_step_names_of_them_all(tmp_path):
    one = TraceBuilder(rank=0, world_size=2)
    one.step(1, 0, 1000)
    one.launch("cudaLaunchKernel", 100, 20, "gemm", 150, 600)
    three = TraceBuilder(rank=1, world_size=2)
    for k in range(3):
        three.step(k + 1, k * 1000, 1000)
        three.launch("cudaLaunchKernel", k * 1000 + 100, 20, "gemm", k * 1000 + 150, 600)
    paths = [str(one.write(tmp_path / "a.json")), str(three.write(tmp_path / "b.json"))]
    results, names = trace_ranks.analyse_files(paths, workers=2)  # small: here, not in workers
    assert len(names) == 3 and results[0].step_names == {"ProfilerStep#1"}
    # with its own single name the last (only) step would be kept in the GPU view
    own = analyse_rank(load_trace(paths[0]), 1)
    union = analyse_rank(load_trace(paths[0]), 3)
    assert own.temporal != union.temporal
    assert results[0].report.temporal == union.temporal


def test_as_many_workers_as_cores_files_and_memory_allow(tmp_path, monkeypatch):
    files = []
    for k in range(4):
        path = tmp_path / f"r{k}.json"
        with open(path, "wb") as fh:
            fh.truncate(100_000_000)  # 100 MB, sparse
        files.append(str(path))
    assert trace_ranks.estimate_mb(files[0]) == pytest.approx(110.0)
    monkeypatch.setattr(trace_ranks.os, "sched_getaffinity", lambda _: {0, 1, 2, 3, 4, 5})
    monkeypatch.setattr(trace_ranks, "_available_mb", lambda: 10_000.0)
    assert trace_ranks.jobs(files) == 4  # no more than the files
    monkeypatch.setattr(trace_ranks, "_available_mb", lambda: 250.0)
    assert trace_ranks.jobs(files) == 2  # two files' analyses fit
    monkeypatch.setattr(trace_ranks, "_available_mb", lambda: 50.0)
    assert trace_ranks.jobs(files) == 1
    assert trace_ranks.jobs(files, asked=8) == 4 and trace_ranks.jobs(files, asked=1) == 1


def test_jobs_that_are_not_a_count_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--jobs", "0", str(tmp_path)])
    assert exc.value.code == 2
    assert "'0' is not a number of processes (1 or more)" in capsys.readouterr().err
