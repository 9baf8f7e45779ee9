"""How each rank of a launched job ended, and which ended the job (``process.rank_endings``),
from what each rank streamed and the launcher's exit codes."""

from __future__ import annotations

import signal

from torchdoctor.process.ending import PEER_LEFT_NOTE
from torchdoctor.process.rank_endings import describe, first_cause, rank_ends, uneven
from torchdoctor.process.stream import Final, Hello, StreamState

PEER_LOST = ["RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer\n"]


def rank(
    n: int,
    status: str | None,
    at: float,
    traceback: list[str] | None = None,
    steps: int = 10,
    notes: list[str] | None = None,
    cause: str = "",
) -> StreamState:
    """A rank's stream: its last word (``status`` None: none came) and when it ended."""
    state = StreamState(hello=Hello(rank=n, local_rank=n, world_size=2, pid=1))
    if status is None:
        state.closed_at = at
        state.snapshot = {"seen": {"optimizer_steps": steps}}
    else:
        record = {"status": status, "seen": {"optimizer_steps": steps}, "notes": notes or []}
        if cause:  # how its own process decided it ended (process.ending)
            record["ending"] = {"status": status, "exit_status": 0, "cause": cause}
        state.final = Final(record, exit_status=1, traceback=traceback or [])
        state.final_at = at
    return state


def cause_of(states, exitcodes=None, stopped=None):
    found = first_cause(rank_ends(states, exitcodes or {}, stopped))
    return found.rank if found is not None else None


def test_the_rank_that_raised_is_blamed_not_the_one_whose_collective_lost_it():
    states = [rank(0, "script-error", 1.0, PEER_LOST), rank(1, "script-error", 2.0, ["ValueError"])]
    assert cause_of(states) == 1
    ends = rank_ends(states, {}, None)
    assert [e.ending for e in ends] == ["follower", "raised"]
    assert describe(ends)[0].startswith("ended when rank 1 did")


def test_a_killed_rank_whose_stream_closed_late_is_still_the_cause():
    # Its DataLoader worker held the socket a while after the rank died.
    states = [rank(0, "script-error", 2.0, PEER_LOST), rank(1, None, 5.0)]
    assert cause_of(states) == 1


def test_ranks_that_raise_their_own_errors_both_keep_them():
    # Both ranks fail the same way before any collective (torch.cuda.set_device on a CPU box).
    states = [rank(0, "script-error", 2.0, ["AttributeError: x\n"], steps=0),
              rank(1, "script-error", 1.0, ["AttributeError: x\n"], steps=0)]  # fmt: skip
    ends = rank_ends(states, {}, None)
    assert [e.ending for e in ends] == ["raised", "raised"] and cause_of(states) == 1
    assert describe(ends) == {
        0: "raised AttributeError at step 0",
        1: "raised AttributeError at step 0",
    }


def test_ranks_whose_data_ran_out_together_blame_nobody():
    states = [rank(0, "partial", 1.0, steps=32), rank(1, "partial", 1.5, steps=32)]
    ends = rank_ends(states, {}, None)
    assert cause_of(states) is None and uneven(ends) == []
    assert "its data ran out" in describe(ends)[0]


def test_a_rank_that_ran_out_while_another_went_on_is_uneven_inputs():
    states = [rank(0, "script-error", 2.0, PEER_LOST, steps=13), rank(1, "partial", 1.5, steps=12)]
    ends = rank_ends(states, {}, None)
    assert cause_of(states) is None
    assert [e.rank for e in uneven(ends)] == [1]
    # torchdoctor's own collective lost the peer: the rank stopped, and follows too.
    states[0] = rank(
        0,
        "partial",
        2.0,
        steps=20,
        notes=[f"{PEER_LEFT_NOTE} after 8 measured steps"],
        cause="peer-lost",
    )
    ends = rank_ends(states, {}, None)
    assert ends[0].ending == "follower" and [e.rank for e in uneven(ends)] == [1]
    assert describe(ends)[0].startswith("ended when rank 1 did")


def test_the_launcher_exit_code_names_the_signal_and_the_launcher_ended_the_others():
    states = [rank(0, None, 2.0, steps=6), rank(1, None, 1.0, steps=6)]
    ends = rank_ends(states, {0: -signal.SIGTERM, 1: -signal.SIGABRT}, None)
    assert [e.ending for e in ends] == ["follower", "killed"]
    assert describe(ends)[1].startswith("was killed by SIGABRT (signal 6")
    exited = rank_ends([rank(0, None, 1.0, steps=6)], {0: 3}, None)
    assert describe(exited)[0].startswith("exited with status 3 without torchdoctor's last word")


def test_a_job_torchdoctor_stopped_blames_no_rank():
    states = [rank(0, None, 2.0), rank(1, None, 1.0)]
    ends = rank_ends(states, {}, "interrupted")
    assert first_cause(ends) is None
    assert describe(ends, "on SIGTERM (signal 15)")[0] == (
        "stopped by torchdoctor on SIGTERM (signal 15) at step 10"
    )


def test_the_earliest_cause_wins_and_a_complete_job_has_none():
    assert cause_of([rank(0, None, 3.0), rank(1, "script-error", 2.0, ["KeyError"])]) == 1
    assert cause_of([rank(0, "complete", 1.0), rank(1, "complete", 1.0)]) is None
    # Only followers (every rank lost its peer): no rank raised on its own.
    assert cause_of([rank(0, "script-error", 3.0, PEER_LOST),
                     rank(1, "script-error", 2.0, PEER_LOST)]) is None  # fmt: skip


def test_a_whole_job_that_took_steps_but_measured_none_exits_0():
    # run --whole with --nproc-per-node: fewer steps than --warmup, so none measured part by part,
    # yet the job trained; each rank's own ending says 0, and so must the job's (it said 3).
    from torchdoctor.options import RunOptions
    from torchdoctor.process.launch import job_outcome
    from torchdoctor.process.target import Target
    from torchdoctor.record import RunRecord, StepSeries, WholeRun

    def whole_rank(n: int) -> StreamState:
        record = RunRecord(steps=StepSeries(), status="complete")
        record.whole_run = WholeRun(wall_s=2.0, goodput=0.5, steps=3)
        state = StreamState(hello=Hello(rank=n, local_rank=n, world_size=2, pid=1))
        state.final = Final(record.to_dict(), exit_status=0, traceback=[])
        state.final_at = 1.0
        return state

    options = RunOptions(whole=True, warmup=5, nproc_per_node=2)
    outcome = job_outcome([whole_rank(0), whole_rank(1)], 0, Target(script="t.py"), options,
                          timed_out=False, signalled=None)  # fmt: skip
    assert outcome.record.status == "complete"
    assert outcome.exit_status == 0


def test_a_rank_whose_heartbeat_still_counts_steps_is_not_stalled():
    # A job held for Join after its phases: rank 1 waits in Join's loop, rank 0 steps on with its
    # steps unlogged; both logs ended 30 s before the stop. Only the heartbeat says rank 0 steps.
    from torchdoctor.process.rank_endings import stalled
    from torchdoctor.process.stacks import StoppedAt
    from torchdoctor.process.stream import LoggedStep
    from torchdoctor.record import DistributedReport, RankRun, RunRecord

    def job_and_states(rank0_stepped_at):
        job = RunRecord(notes=[])
        job.distributed = DistributedReport(world_size=2, ranks=[RankRun(rank=0), RankRun(rank=1)])
        states = []
        for n in (0, 1):
            state = rank(n, None, 0.0)
            state.logged = [
                LoggedStep("measure", {"forward": 2.0}, 1, int(i * 2e6)) for i in range(8)
            ]
            states.append(state)
        states[0].stepped_at = rank0_stepped_at
        where = {0: StoppedAt("train.py:30", "one_epoch", "loss.backward()", True),
                 1: StoppedAt("train.py:44", "<module>", "with Join([ddp]):", True)}  # fmt: skip
        return job, states, where

    job, states, where = job_and_states(rank0_stepped_at=29.5)
    stalled(job, states, where, at=30.0)
    assert not [n for n in job.notes if "stalled" in n], job.notes
    assert job.distributed.ranks[1].stopped_at.startswith("train.py:44")
    # the same job whose heartbeat stopped counting long before: every rank waited, a stall
    job, states, where = job_and_states(rank0_stepped_at=10.0)
    stalled(job, states, where, at=30.0)
    assert job.notes[0].startswith("the job stalled: every rank was waiting in a collective")


def test_a_job_whose_ctrl_c_went_unanswered_says_so():
    # the launcher was handed Ctrl-C and the job had not ended INTERRUPT_GRACE_S later
    from torchdoctor.options import RunOptions
    from torchdoctor.process.launch import _stopped_words

    words = _stopped_words(RunOptions(nproc_per_node=2), False, signal.SIGINT, 60.0)
    ends = rank_ends([rank(0, None, 2.0), rank(1, None, 1.0)], {}, "interrupted")
    assert describe(ends, words)[0] == (
        "stopped by torchdoctor after SIGINT (signal 2) went unanswered for 60 s at step 10"
    )
    assert _stopped_words(RunOptions(), False, signal.SIGINT) == "on SIGINT (signal 2)"
