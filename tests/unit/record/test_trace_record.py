"""The trace report as a typed part of the record: it round-trips, and v1 files load into it."""

from __future__ import annotations

import json

from paths import DATA
from torchdoctor.record import (
    CommOverlap,
    IdleBreakdown,
    KernelStat,
    LaunchStats,
    PageableCopies,
    ParseStats,
    RankReport,
    RankSkew,
    RunRecord,
    SyncReport,
    SyncSite,
    TemporalBreakdown,
    TraceReport,
    TraceStep,
    Verdict,
)

RECORDS = DATA / "records"


def _rank(label: str, wall: float) -> RankReport:
    """A rank with every optional part filled, so the round trip exercises each nested type."""
    parts = {"gpu_kernels": wall * 0.6, "cpu_ops": wall * 0.3, "other": wall * 0.1}
    return RankReport(
        label=label,
        rank=int(label.split()[-1]),
        world_size=2,
        path=f"/traces/{label}.json",
        events=1234,
        device="NVIDIA A100",
        has_gpu=True,
        steps=[TraceStep("ProfilerStep#1", wall, parts), TraceStep("ProfilerStep#2", wall, parts)],
        analysed_steps=1,
        step_parts_ms=parts,
        step_wall_ms=wall,
        step_shares={k: v / wall for k, v in parts.items()},
        temporal=TemporalBreakdown(label, 900.0, 90.0, 700.0, 110.0, 10.0, 77.8, 12.2, {"A": 1.5}),
        idle=IdleBreakdown(
            label,
            {"7": {"host_wait": 40.0, "kernel_wait": 10.0, "other": 0.0}},
            {"host_wait": 40.0, "kernel_wait": 10.0, "other": 0.0},
            {"host_wait": 80.0, "kernel_wait": 20.0, "other": 0.0},
        ),
        syncs=SyncReport(
            2,
            0.5,
            [SyncSite("cudaStreamSynchronize", 2, 0.5, "train.py", 40, "step", "aten::item")],
        ),
        pageable_memcpy=PageableCopies(3, 0.25, 1.5, {"HtoD": 3}),
        launch=LaunchStats(100, 60, 0.6, 8.0, 1.0, 2.0, 100, 2.0, True),
        top_kernels=[KernelStat("gemm", 10, 5.0, 500.0, 80.0)],
        dataloader_share=0.0,
        comm=CommOverlap(3.0, 7.0, 1.0, 33.3, 2.2),
        notes=[f"{label}: a note"],
        parse=ParseStats(1.5, 0.02),
    )


def _trace_record() -> RunRecord:
    return RunRecord(
        verdict=Verdict("HOST-BOUND", "why", "next", {"host": 0.6}),
        trace=TraceReport(
            files=["/traces/rank 0.json", "/traces/rank 1.json"],
            ranks=[_rank("rank 0", 10.0), _rank("rank 1", 13.0)],
            skew=RankSkew({"rank 0": 10.0, "rank 1": 13.0}, "rank 1", "rank 0", 0.3, True),
            thresholds={"INPUT_BOUND_SHARE": 0.3},
            verdict=Verdict("COMPUTE-BOUND", "w", "n", {"compute": 0.6}),
            parse=ParseStats(3.0, 0.04),
            recorded_files=["/traces/rank 0.json"],
        ),
    )


def test_trace_report_round_trips(tmp_path):
    path = _trace_record().save(tmp_path / "r.json")
    again = RunRecord.load(path)
    assert again == _trace_record()
    assert isinstance(again.trace.ranks[1].syncs.sites[0], SyncSite)
    data = json.loads(path.read_text())
    assert data["trace"]["ranks"][0]["idle"]["streams_us"]["7"]["host_wait"] == 40.0
    assert data["trace"]["verdict"]["kind"] == "COMPUTE-BOUND"
    assert "extra" not in data


def test_a_failed_analysis_keeps_the_recorded_files_only(tmp_path):
    record = RunRecord(trace=TraceReport(recorded_files=["t/a.pt.trace.json"]))
    again = RunRecord.load(record.save(tmp_path / "r.json"))
    assert again == record
    assert not again.trace.analysed and _trace_record().trace.analysed


def test_v1_analyze_record_loads_into_the_trace_report(tmp_path):
    record = RunRecord.load(RECORDS / "analyze_v1.json")
    v1 = json.loads((RECORDS / "analyze_v1.json").read_text())["extra"]["trace"]
    trace = record.trace
    assert isinstance(trace, TraceReport) and "extra" not in record.to_dict()
    (rank,) = trace.ranks
    assert isinstance(rank.temporal, TemporalBreakdown) and isinstance(rank.comm, CommOverlap)
    assert rank.idle.streams_us == v1["ranks"][0]["idle"]["streams_us"]
    assert [k.name for k in rank.top_kernels] == [k["name"] for k in v1["ranks"][0]["top_kernels"]]
    assert rank.steps[0] == TraceStep(**v1["ranks"][0]["steps"][0])
    assert trace.verdict == Verdict(**v1["verdict"]) == record.verdict
    assert trace.thresholds == v1["thresholds"] and trace.parse == ParseStats(**v1["parse"])
    assert trace.recorded_files == []  # analyze records no files of its own
    # Saved again, the migrated record is a schema-2 record that loads to the same thing.
    assert RunRecord.load(record.save(tmp_path / "v2.json")) == record


def test_v1_run_record_moves_trace_files_into_the_trace_report():
    record = RunRecord.load(RECORDS / "run_v1.json")
    v1 = json.loads((RECORDS / "run_v1.json").read_text())["extra"]
    assert record.trace.recorded_files == v1["trace_files"]
    assert record.trace.files == v1["trace"]["files"]
    assert record.trace.analysed and record.trace.verdict.kind == "INPUT-BOUND"
    assert "extra" not in record.to_dict()
    (rank,) = record.trace.ranks
    assert rank.rank is None and rank.temporal is None and rank.syncs.has_stacks
