"""The supervisor's outcome of one process (``supervisor._outcome``), from what the process
streamed and how it ended: its status, exit status, notes and the verdict that reads them."""

from __future__ import annotations

import signal

import pytest

from torchdoctor._errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_SCRIPT_ERROR,
    EXIT_TIMED_OUT,
    TorchdoctorError,
)
from torchdoctor.options import RunOptions
from torchdoctor.process import Target
from torchdoctor.process.ending import FINISHED, ScriptEnd, decide_script, settle
from torchdoctor.process.stream import Failed, Final, StreamState
from torchdoctor.process.supervisor import _outcome
from torchdoctor.record import RunRecord

TARGET = Target(script="train.py")
OPTIONS = RunOptions(max_seconds=30)


def one_step() -> RunRecord:
    record = RunRecord(warmup_steps=3, requested_steps=20, status="partial")
    record.steps.add_step({"data_wait": 1.0, "forward": 5.0, "backward": 8.0}, batches=1)
    return record


def snapshot_only() -> StreamState:
    """A process that sent a snapshot after its first measured step, then no last word."""
    state = StreamState()
    state.snapshot = one_step().to_dict()
    return state


def test_a_run_cut_at_the_bound_after_one_step_is_told_to_raise_the_bound():
    # the verdict used to be derived from the snapshot's status ("partial"), before the status
    # was set: its Next said to give the run more data or epochs
    out = _outcome(snapshot_only(), -signal.SIGTERM, TARGET, OPTIONS, True, None)
    assert (out.record.status, out.exit_status) == ("timed-out", EXIT_TIMED_OUT)
    assert out.record.verdict is not None
    assert out.record.verdict.next.startswith("raise --max-seconds"), out.record.verdict.next


def test_a_script_that_caught_the_bounds_stop_after_one_step_is_told_to_raise_it():
    # it ended as if on its own (a SIGTERM handler that ends the loop): the child said partial
    child = one_step()
    settle(child, decide_script(ScriptEnd(FINISHED, 1, {"optimizer_steps": 4}, 3, 20)))
    assert child.verdict is not None and child.verdict.next.startswith("give the run more data")
    state = StreamState()
    state.final = Final(child.to_dict(), EXIT_OK)
    out = _outcome(state, 0, TARGET, OPTIONS, True, None)
    assert (out.record.status, out.exit_status) == ("timed-out", EXIT_TIMED_OUT)
    assert out.record.verdict is not None
    assert out.record.verdict.next.startswith("raise --max-seconds"), out.record.verdict.next
    assert not any(n.startswith("the script finished") for n in out.record.notes)
    assert out.record.ending is not None and out.record.ending.cause == "bound"


def test_a_process_killed_without_its_last_word():
    out = _outcome(snapshot_only(), -signal.SIGKILL, TARGET, OPTIONS, False, None)
    assert (out.record.status, out.exit_status) == ("killed", EXIT_SCRIPT_ERROR)
    assert "killed by SIGKILL (signal 9) (the OOM killer sends SIGKILL)" in out.record.notes[-1]
    assert out.record.verdict is not None
    assert out.record.verdict.next.startswith("find what ended the process")


def test_torchdoctors_own_failure_in_the_child_comes_before_the_bound():
    state = snapshot_only()
    state.error = Failed("the step hook failed", internal=True)
    out = _outcome(state, 1, TARGET, OPTIONS, True, None)
    assert (out.record.status, out.exit_status) == ("internal-error", EXIT_INTERNAL)
    assert (
        "torchdoctor itself failed: the step hook failed. Please report this." in out.record.notes
    )


def test_a_script_that_could_not_run_is_the_users_error_not_a_record():
    state = StreamState()
    state.error = Failed("no such file: train.py", "check the path")
    with pytest.raises(TorchdoctorError, match="no such file"):
        _outcome(state, 2, TARGET, OPTIONS, False, None)


def test_a_rank_stopped_in_joins_loop_keeps_where_its_data_ran_out_from_its_heartbeat():
    # Killed at the bound with no last word: only its heartbeat said it waited in Join's loop.
    from torchdoctor.process._processes import record_from_stream
    from torchdoctor.record import SEEN_IN_JOIN

    state = snapshot_only()
    state.seen = {"optimizer_steps": 6, SEEN_IN_JOIN: 6}
    assert record_from_stream(state, ["train.py"], OPTIONS).joined_at == 6
    state.seen = {"optimizer_steps": 806}  # a rank still stepping
    assert record_from_stream(state, ["train.py"], OPTIONS).joined_at is None
