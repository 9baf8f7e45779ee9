"""A folder of rank files analysed a file at a time, in worker processes
(``analysis.trace_ranks``): the same record as one process gives, whatever the workers do."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from torchdoctor.analysis import trace_ranks
from torchdoctor.analysis.trace_analysis import analyse_rank, analyze_trace
from torchdoctor.cli import main
from torchdoctor.trace import load_trace
from tracegen import TraceBuilder, ddp_trace


def _folder(tmp_path, loaders_us=(0.0, 400.0, 100.0)):
    for rank, loader in enumerate(loaders_us):
        ddp_trace(rank, len(loaders_us), loader, max(loaders_us)).write(tmp_path / f"r{rank}.json")
    (tmp_path / "r9.json").write_text('{"traceEvents": [{"ph": "X", "na')  # cut short
    return tmp_path


def _ranks(record):
    """The ranks' reports without the parse's own seconds (they differ run to run)."""
    return [dataclasses.replace(r, parse=None) for r in record.trace.ranks]


def test_workers_give_the_record_one_process_gives(tmp_path):
    folder = _folder(tmp_path)
    alone = analyze_trace([str(folder)], jobs=1)
    workers = analyze_trace([str(folder)], jobs=3)
    assert [r.label for r in workers.trace.ranks] == ["rank 0", "rank 1", "rank 2"]
    assert _ranks(workers) == _ranks(alone)
    assert workers.trace.skew == alone.trace.skew and workers.trace.skew.straggler_rank == "rank 1"
    assert workers.verdict == alone.verdict
    assert workers.notes == alone.notes and workers.notes[0].startswith("skipped ")
    assert "r9.json" in workers.notes[0]


def test_a_worker_that_ends_without_its_result_has_its_file_analysed_here(tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    alone = analyze_trace([str(folder)], jobs=1)
    started = []

    def dies(path, *_):
        started.append(path)
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    monkeypatch.setattr(trace_ranks, "_start", dies)
    record = analyze_trace([str(folder)], jobs=2)
    assert len(started) == 4  # every file went to a worker first
    assert _ranks(record) == _ranks(alone)


def test_a_rank_with_one_step_is_analysed_with_the_step_names_of_them_all(tmp_path):
    one = TraceBuilder(rank=0, world_size=2)
    one.step(1, 0, 1000)
    one.launch("cudaLaunchKernel", 100, 20, "gemm", 150, 600)
    three = TraceBuilder(rank=1, world_size=2)
    for k in range(3):
        three.step(k + 1, k * 1000, 1000)
        three.launch("cudaLaunchKernel", k * 1000 + 100, 20, "gemm", k * 1000 + 150, 600)
    paths = [str(one.write(tmp_path / "a.json")), str(three.write(tmp_path / "b.json"))]
    results, names = trace_ranks.analyse_files(paths, workers=2)
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
    assert trace_ranks.estimate_mb(files[0]) == pytest.approx(160.0)
    monkeypatch.setattr(trace_ranks.os, "sched_getaffinity", lambda _: {0, 1, 2, 3, 4, 5})
    monkeypatch.setattr(trace_ranks, "_available_mb", lambda: 10_000.0)
    assert trace_ranks.jobs(files) == 4  # no more than the files
    monkeypatch.setattr(trace_ranks, "_available_mb", lambda: 400.0)
    assert trace_ranks.jobs(files) == 2  # two files' analyses fit
    monkeypatch.setattr(trace_ranks, "_available_mb", lambda: 50.0)
    assert trace_ranks.jobs(files) == 1
    assert trace_ranks.jobs(files, asked=8) == 4 and trace_ranks.jobs(files, asked=1) == 1


def test_jobs_that_are_not_a_count_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--jobs", "0", str(tmp_path)])
    assert exc.value.code == 2
    assert "'0' is not a number of processes (1 or more)" in capsys.readouterr().err
