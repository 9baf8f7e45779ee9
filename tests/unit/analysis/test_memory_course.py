"""Memory creeping over the measured steps (``analysis.memory_course``): the rate from three
readings, a jump or an allocator warming up not called a creep, the line of a list the watched
steps saw, and when the memory still free would run out."""

from __future__ import annotations

import pytest

from torchdoctor.analysis.memory_course import add_creep, creep_per_step
from torchdoctor.record import Finding, LoaderSettings, MemoryCourse, RunRecord, StepSeries

MB = 1024 * 1024


def course(used_mb, memory="host", free_mb=10_000, steps=(0, 10, 20)) -> MemoryCourse:
    return MemoryCourse(memory, list(steps), [int(u * MB) for u in used_mb], int(free_mb * MB))


def record(c: MemoryCourse | None, step_ms: float = 100.0, findings=()) -> RunRecord:
    rec = RunRecord(memory_course=c, findings=list(findings))
    rec.steps = StepSeries()
    for _ in range(5):
        rec.steps.add_step({"forward": step_ms}, 1)
    return rec


@pytest.mark.parametrize(
    ("used", "memory", "creeps"),
    [
        ((400, 500, 600), "host", True),  # 10 MB a step in both halves, 50% of the process
        ((400, 600, 600), "host", False),  # one jump: the second half grew nothing
        ((400, 412, 424), "host", False),  # 1.2 MB a step, 6% of the process: a warming allocator
        ((400, 412, 424), "device", True),  # the allocator's own count: no warming to discount
        ((400, 405, 410), "device", False),  # under 1 MB a step
    ],
)
def test_a_creep_grows_in_both_halves_by_a_megabyte_a_step(used, memory, creeps):
    rate = creep_per_step(course(used, memory))
    assert (rate is not None) == creeps
    if creeps:
        assert rate == pytest.approx((used[2] - used[0]) * MB / 20)


def test_a_creep_alone_is_told_with_when_memory_runs_out():
    rec = record(course((400, 500, 600), free_mb=1000), step_ms=100.0)
    add_creep(rec)
    (found,) = rec.findings
    assert found.kind == "loop.memory-creep" and found.file is None
    assert found.detail["mb_per_step"] == 10.0
    assert found.detail["steps_to_exhaustion"] == 100  # 1000 MB free at 10 MB a step
    assert found.detail["seconds_to_exhaustion"] == 10.0 and found.severity == "critical"
    assert "run --whole" in found.fix


def test_a_creep_beside_a_kept_graph_is_told_at_its_line():
    kept = Finding("loop.graph-kept", "kept", "losses.append(loss.detach())", "t.py", 9, "x")
    rec = record(course((400, 500, 600), free_mb=1e6), findings=[kept])
    add_creep(rec)
    creep = rec.findings[-1]
    assert (creep.file, creep.line) == ("t.py", 9) and creep.fix.startswith("losses.append")
    assert creep.severity == "warning"  # 100,000 steps of 0.1 s: over an hour


def test_a_list_seen_keeping_tensors_is_given_its_end_and_the_epoch_not_changed_in_place():
    listed = Finding(
        "loop.memory-creep", "`f` keeps 2.0 MB", "fix", "t.py", 29, "f.append(x)",
        detail={"mb_per_step": 2.0, "device": "cpu"},
    )  # fmt: skip
    rec = record(course((400, 401, 402), free_mb=64), findings=[listed])
    rec.loader = LoaderSettings(
        dataset="TensorDataset", sampler="SequentialSampler", collate_fn="default_collate",
        dataset_len=8192, batch_size=512, num_workers=0, pin_memory=False,
        persistent_workers=False, prefetch_factor=None, drop_last=False,
    )  # fmt: skip
    add_creep(rec)
    (found,) = rec.findings  # no second finding for the same creep
    assert found is not listed and listed.title == "`f` keeps 2.0 MB"  # a snapshot shares it
    assert found.detail["steps_to_exhaustion"] == 32 and found.detail["epoch_steps"] == 16
    assert "holds about 32 MiB at the epoch's end" in found.title
    assert found.severity == "warning"  # 16 steps an epoch, 32 to run out


def test_a_list_on_the_device_is_not_measured_against_the_hosts_memory():
    listed = Finding("loop.memory-creep", "k", "f", detail={"mb_per_step": 2.0, "device": "cuda:0"})
    rec = record(course((400, 500, 600), memory="host"), findings=[listed])
    add_creep(rec)
    assert rec.findings == [listed]  # no free device memory was read: nothing to add


def test_no_reading_or_no_growth_adds_nothing():
    for c in (None, course((400, 400, 401))):
        rec = record(c)
        add_creep(rec)
        assert rec.findings == []


def test_a_whole_run_that_creeps_is_told_its_rate_and_when_the_host_runs_out():
    from torchdoctor.analysis.whole_course import course_findings
    from torchdoctor.record import WholeBlock

    # 13 blocks of 10 steps, 10 s apart; the process grows 100 MB a block from 500 MB; the
    # host has 3000 MB left at the end. The first block is the startup's (left out).
    blocks = [
        WholeBlock(10.0 * i, 10, 50.0, rss_mb=500.0 + 100 * i, free_mb=3000.0) for i in range(13)
    ]
    (found,) = course_findings(blocks)
    assert found.kind == "whole.memory-creep"
    assert found.detail["mb_per_step"] == 10.0  # 100 MB a block of 10 steps
    assert found.detail["seconds_to_exhaustion"] == 300.0  # 3000 MB at 10 MB/s
    assert "run out in about 5 min" in found.title
    flat = [WholeBlock(10.0 * i, 10, 50.0, rss_mb=500.0, free_mb=3000.0) for i in range(13)]
    assert course_findings(flat) == []


def test_a_whole_run_shorter_than_a_minute_is_told_its_creep_not_its_drift():
    """A run of 30 s whose memory went 427 -> 776 MiB was told nothing: drift's minute was
    asked of the creep too (load moves step times, not memory)."""
    from torchdoctor.analysis.whole_course import course_findings
    from torchdoctor.record import WholeBlock

    blocks = [
        WholeBlock(2.5 * i, 10, 50.0 + 10 * i, rss_mb=427.0 + 30 * i, free_mb=3000.0)
        for i in range(13)
    ]
    assert [f.kind for f in course_findings(blocks)] == ["whole.memory-creep"]
