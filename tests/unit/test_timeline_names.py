"""``--timeline``'s process names and, in a job, where each rank's file goes."""

from __future__ import annotations

from torchdoctor.report.timeline import rank_timeline_path, timeline, timeline_paths


def test_the_trace_names_its_process_and_rank():
    events = timeline([], pid=7, process="train.py --lr 1", rank=1)["traceEvents"]
    (named,) = [e for e in events if e["name"] == "process_name"]
    assert named["pid"] == 7 and named["args"]["name"] == "rank 1: train.py --lr 1"
    (plain,) = [e for e in timeline([], pid=7, process="train.py")["traceEvents"]
                if e["name"] == "process_name"]  # fmt: skip
    assert plain["args"]["name"] == "train.py"


def test_each_rank_writes_beside_the_path_given():
    assert rank_timeline_path("out/t.json", 1) == "out/t.rank1.json"
    assert rank_timeline_path("trace", 0) == "trace.rank0"
    assert rank_timeline_path("dir.d/trace", 0) == "dir.d/trace.rank0"
    assert timeline_paths("t.json", [0, 1]) == ["t.rank0.json", "t.rank1.json"]
    assert timeline_paths("t.json", None) == ["t.json"]
