"""What a supervised run's process does beside the script: the step log (steps written into a
shared file as they end, read back by the supervisor) and its own threads' priority."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from torchdoctor.capture import lower_thread_priority
from torchdoctor.process.stream import (
    MESSAGES,
    Failed,
    Final,
    Hello,
    Progress,
    Seen,
    Snapshot,
    StepLog,
    StepLogAt,
    StreamReader,
    StreamWriter,
    Whole,
    decode,
    encode,
    read_step_log,
)
from torchdoctor.record import (
    STEP_PARTS,
    SampledPlace,
    TimedCost,
    WholeBlock,
    WholeEvent,
    WholeSummary,
)
from torchdoctor.report.timeline import phases_of_parts, timeline


def _parts(ms: float) -> dict[str, float]:
    return {part: ms * (i + 1) for i, part in enumerate(STEP_PARTS)}


def test_logged_steps_read_back_in_order(tmp_path):
    log = StepLog(str(tmp_path / "steps"), capacity=8)
    log.append("measure", 1, _parts(0.5), start_ns=10**12)
    log.append("measure", 0, _parts(1.0), start_ns=10**12 + 5)
    log.append("no-sync", 2, _parts(2.0))
    steps = read_step_log(log.path)
    assert [(phase, batches) for phase, _, batches, _ in steps] == [
        ("measure", 1),
        ("measure", 0),
        ("no-sync", 2),
    ]
    assert steps[1].parts == _parts(1.0) and steps[1].start_ns == 10**12 + 5
    assert [s[0] for s in read_step_log(log.path, start=2)] == ["no-sync"]


def test_a_full_log_keeps_its_first_steps(tmp_path):
    log = StepLog(str(tmp_path / "steps"), capacity=2)
    for ms in (1.0, 2.0, 3.0):
        log.append("model-alone", 0, _parts(ms))
    assert [parts["data_wait"] for _, parts, _, _ in read_step_log(log.path)] == [1.0, 2.0]


def test_a_missing_or_cut_log_reads_as_what_it_holds(tmp_path):
    assert read_step_log(str(tmp_path / "never-made")) == []
    log = StepLog(str(tmp_path / "steps"), capacity=4)
    for ms in (1.0, 2.0, 3.0):
        log.append("measure", 0, _parts(ms))
    size = os.path.getsize(log.path)
    os.truncate(log.path, size - 2 * (size - 8) // 4 - 1)  # cut inside its second step
    assert len(read_step_log(log.path)) == 1


def test_the_reader_keeps_the_steps_logged_after_the_last_snapshot(tmp_path):
    log = StepLog(str(tmp_path / "steps"), capacity=8)
    read_fd, write_fd = os.pipe()
    reader = StreamReader(read_fd)
    writer = StreamWriter(write_fd)
    writer.send(StepLogAt(log.path))
    log.append("measure", 1, _parts(1.0))
    writer.send(Snapshot({}, log.count))
    log.append("measure", 1, _parts(2.0))
    log.append("model-alone", 0, _parts(3.0))
    writer.close()  # the process ended: the reader reads the log
    reader.join(timeout_s=10)
    assert [(p, parts["data_wait"]) for p, parts, *_ in reader.state.steps] == [
        ("measure", 2.0),
        ("model-alone", 3.0),
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_our_threads_run_at_the_lowest_priority_and_the_scripts_do_not():
    seen = {}
    script = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def ours():
        lower_thread_priority()
        seen["ours"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    thread = threading.Thread(target=ours)
    thread.start()
    thread.join()
    assert seen["ours"] == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == script  # untouched


def test_a_timeline_from_logged_parts_lays_them_end_to_end_from_the_steps_start():
    parts = {part: 0.0 for part in STEP_PARTS} | {"data_wait": 2.0, "forward": 1.0}
    events = timeline(phases_of_parts([("measure", parts, 5_000_000)]))["traceEvents"]
    spans = [(e["name"], e["ts"], e["dur"]) for e in events if e.get("cat") in ("step", "part")]
    assert spans == [
        ("measure step 1", 5000.0, 3000.0),
        ("data_wait", 5000.0, 2000.0),
        ("forward", 7000.0, 1000.0),
    ]


def test_every_message_reads_back_as_itself_and_strangers_are_dropped():
    sent = [
        Hello(rank=1, local_rank=1, world_size=2, pid=42),
        StepLogAt("/tmp/steps.42"),
        Snapshot({"status": "running"}, logged=3),
        Progress("measure", 2, 20, detail=None),
        Seen({"optimizer_steps": 5}),
        Whole(
            WholeSummary(
                wall_s=3.5,
                steps=7,
                checkpoint=TimedCost(0.4, 2, "train.py:9", sampled_s=0.1),
                excess=(SampledPlace(("train.py", 12, "flush", 10), 0.2, gaps=3),),
                in_step=(("train.py", 5, "loss_fn", 4),),
                blocks=(WholeBlock(1.0, 32, 10.5, None),),
                tail_places=(SampledPlace(("in-boundary", ("train.py", 20, "<module>", 1)), 0.1),),
                events=(WholeEvent("checkpoint", 2.0, 0.2),),
            )
        ),
        Final({"status": "complete"}, 0, ["Traceback", "ValueError: x"]),
        Failed("no such script", "check the path", exit_status=2),
    ]
    assert {type(m) for m in sent} == set(MESSAGES.values())  # one of each kind
    assert [decode(encode(m)) for m in sent] == sent
    # not ours: no kind, an unknown kind, a field missing or one too many, not JSON
    for line in (
        b'{"rank": 1}\n',
        b'{"t": "gossip"}\n',
        b'{"t": "hello", "rank": 1}\n',
        b'{"t": "steplog", "path": "x", "size": 3}\n',
        b'{"t": "whole", "summary": {"steps": 1}}\n',  # a summary without its wall time
        b"garbage\n",
    ):
        assert decode(line) is None


def test_a_progress_display_that_fails_costs_the_display_not_the_messages(capsys):
    read_fd, write_fd = os.pipe()
    shown = []

    def display(phase, done, total):  # takes no detail: a whole run's progress breaks it
        shown.append(phase)

    reader = StreamReader(read_fd, display)
    writer = StreamWriter(write_fd)
    writer.send(Progress("measure", 1, 5))
    writer.send(Progress("whole", 2, 0, detail="step 2"))
    writer.send(Progress("measure", 3, 5))
    writer.send(Final({"status": "complete"}, 0))
    writer.close()
    reader.join(timeout_s=10)
    assert shown == ["measure"]  # shown until it failed, then never again
    assert reader.state.final == Final({"status": "complete"}, 0)
    assert "TypeError" in capsys.readouterr().err
