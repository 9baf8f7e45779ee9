"""How a run ended, decided in one place (``process.ending``): every status from its evidence,
the precedence between causes, and the verdict derived after the status (no real training)."""

from __future__ import annotations

import signal

import pytest

from torchdoctor._errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NO_TRAINING,
    EXIT_OK,
    EXIT_SCRIPT_ERROR,
    EXIT_TIMED_OUT,
)
from torchdoctor.process.ending import (
    CTRL_C,
    FINISHED,
    PEER_LEFT_NOTE,
    RAISED,
    STOPPED,
    JobEnd,
    ScriptEnd,
    Stop,
    decide_job,
    decide_launcher,
    decide_not_started,
    decide_script,
    decide_supervised,
    exit_for,
    exit_status,
    exited,
    settle,
)
from torchdoctor.record import (
    COMPLETE,
    INTERNAL_ERROR,
    INTERRUPTED,
    KILLED,
    NO_TRAINING,
    PARTIAL,
    SCRIPT_ERROR,
    STATUS_PRECEDENCE,
    STATUSES,
    TIMED_OUT,
    Ending,
    RunRecord,
    phase_names,
)

SEEN = {"dataloader_iterators": 1, "batches": 9, "forward_calls": 9, "backward_calls": 9}


def script(ended: str, measured: int = 5, **evidence) -> Ending:
    seen = {**SEEN, "optimizer_steps": evidence.pop("optimizer_steps", measured + 3)}
    return decide_script(ScriptEnd(ended, measured, seen, warmup=3, steps=20, **evidence))


# -- the script's own process ------------------------------------------------------------------


def test_the_measurement_done_is_complete_whatever_the_script_did_after():
    assert script(STOPPED) == Ending(COMPLETE, EXIT_OK, "measured", [])
    # the script went on past the measurement, then ended on its own or was stopped by Ctrl-C
    done = phase_names.DONE
    assert script(FINISHED, phase=done).status == COMPLETE
    after_ctrl_c = script(CTRL_C, phase=done)
    assert after_ctrl_c.status == COMPLETE and after_ctrl_c.exit_status == EXIT_INTERRUPTED
    after_error = script(RAISED, phase=done, error="ValueError")
    assert after_error.status == COMPLETE and after_error.exit_status == EXIT_SCRIPT_ERROR


def test_a_rank_held_for_join_after_an_uneven_join_ends_as_it_was_stopped():
    # Its phases were cut, not done: the job was held until Join let its ranks go.
    done = phase_names.DONE
    where_join_let_go = script(STOPPED, phase=phase_names.MEASURE, uneven_join=True)
    assert (where_join_let_go.status, where_join_let_go.cause) == (PARTIAL, "uneven-join")
    ctrl_c = script(CTRL_C, phase=done, uneven_join=True)
    assert (ctrl_c.status, ctrl_c.exit_status, ctrl_c.cause) == (
        INTERRUPTED,
        EXIT_INTERRUPTED,
        "ctrl-c",
    )
    assert script(FINISHED, phase=done, uneven_join=True).status == PARTIAL


def test_a_script_that_ended_on_its_own_early_is_partial_or_trained_none():
    ran_out = script(FINISHED, measured=4)
    assert (ran_out.status, ran_out.exit_status, ran_out.cause) == (PARTIAL, EXIT_OK, "script-end")
    assert ran_out.notes == [
        "the script finished after 4 of 20 measured steps (its data or epochs ran out); the "
        "figures cover those steps only"
    ]
    none = script(FINISHED, measured=0, optimizer_steps=0)
    assert (none.status, none.exit_status) == (NO_TRAINING, EXIT_NO_TRAINING)
    assert none.notes[0].startswith("the script ended without a training step")
    in_warmup = script(FINISHED, measured=0, optimizer_steps=2)
    assert in_warmup.status == NO_TRAINING and "fewer than the 3 warmup steps" in in_warmup.notes[0]
    model_alone = script(FINISHED, measured=20, phase=phase_names.MODEL_ALONE, model_alone_steps=2)
    assert model_alone.notes == [
        "the script finished during the model-alone phase after 2 of 20 steps"
    ]


def test_sys_exit_0_is_an_end_and_sys_exit_2_the_scripts_error():
    ok = script(exited(0))
    assert (ok.status, ok.exit_status) == (PARTIAL, EXIT_OK)
    assert script(exited(None)).status == PARTIAL  # sys.exit()
    failed = script(exited(2))
    assert (failed.status, failed.exit_status, failed.cause) == (
        SCRIPT_ERROR,
        EXIT_SCRIPT_ERROR,
        "exited",
    )
    assert failed.notes[0].startswith("the script exited with status 2 (sys.exit) after 5 ")
    message = script(exited("bad arguments"))  # Python exits with 1 and prints the message
    assert message.status == SCRIPT_ERROR and "exited with status 1" in message.notes[0]


def test_ctrl_c_and_an_error_of_the_script():
    ctrl_c = script(CTRL_C, measured=1)
    assert (ctrl_c.status, ctrl_c.exit_status) == (INTERRUPTED, EXIT_INTERRUPTED)
    assert ctrl_c.notes == ["interrupted (Ctrl-C) after 1 measured step"]
    raised = script(RAISED, error="ValueError", measured=0)
    assert (raised.status, raised.exit_status, raised.cause) == (
        SCRIPT_ERROR,
        EXIT_SCRIPT_ERROR,
        "raised",
    )
    assert raised.notes[0].startswith("the script raised ValueError after 0 measured steps")


def test_torchdoctors_failure_comes_before_a_lost_peer_before_the_measurement_done():
    failed = script(RAISED, error="TypeError", internal_error="TypeError: x", peer_lost="gone")
    assert (failed.status, failed.exit_status, failed.cause) == (
        INTERNAL_ERROR,
        EXIT_INTERNAL,
        "torchdoctor",
    )
    lost = script(STOPPED, peer_lost="Connection closed by peer", measured=8)
    assert (lost.status, lost.cause) == (PARTIAL, "peer-lost")
    assert lost.notes == [f"{PEER_LEFT_NOTE} after 8 measured steps (Connection closed by peer)"]
    assert script(STOPPED).status == COMPLETE  # without either


def test_a_whole_run_ends_with_the_script():
    ended = script(FINISHED, measured=0, optimizer_steps=50, whole_steps=50)
    assert (ended.status, ended.exit_status) == (COMPLETE, EXIT_OK)  # its steps count
    assert script(exited(0), whole_steps=50).status == COMPLETE
    assert script(CTRL_C, whole_steps=50).status == INTERRUPTED  # cut: not its own end


# -- the supervisor of one process -------------------------------------------------------------


def test_a_process_that_died_without_its_last_word():
    for stop, status, code, cause in (
        (Stop(failure="bad frame", timed_out=True), INTERNAL_ERROR, EXIT_INTERNAL, "torchdoctor"),
        (Stop(timed_out=True, max_seconds=30, signalled=signal.SIGINT), TIMED_OUT, EXIT_TIMED_OUT, "bound"),
        (Stop(signalled=signal.SIGTERM), INTERRUPTED, EXIT_INTERRUPTED, "signal"),
        (Stop(returncode=-signal.SIGKILL), KILLED, EXIT_SCRIPT_ERROR, "process-died"),
    ):  # fmt: skip
        ending = decide_supervised(None, stop, measured=True)
        assert (ending.status, ending.exit_status, ending.cause) == (status, code, cause), stop
    oom = decide_supervised(None, Stop(returncode=-signal.SIGKILL), measured=True)
    assert "(the OOM killer sends SIGKILL)" in oom.notes[0]
    native = decide_supervised(None, Stop(returncode=3), measured=False)
    assert native.notes[0].startswith("the script's process ended with status 3 without")
    assert native.exit_status == EXIT_SCRIPT_ERROR  # a killed run is a failure, measured or not
    bound = decide_supervised(None, Stop(timed_out=True, max_seconds=30), measured=True)
    assert "the --max-seconds bound (30 s)" in bound.notes[0]


def test_a_ctrl_c_that_went_unanswered_says_so():
    # the script ignored the Ctrl-C handed on and was stopped after the grace: killed by the
    # stop (no last word), or ending early on it
    stop = Stop(signalled=signal.SIGINT, unanswered_s=60.0)
    for child in (None, script(FINISHED, measured=4)):
        ending = decide_supervised(child, stop, measured=True)
        assert (ending.status, ending.exit_status) == (INTERRUPTED, EXIT_INTERRUPTED)
        assert "handed it to the script, which had not ended 60 s later" in ending.notes[-1]
    answered = decide_supervised(None, Stop(signalled=signal.SIGINT), measured=True)
    assert answered.notes == ["torchdoctor received SIGINT (signal 2) and stopped the script"]


@pytest.mark.parametrize("ended", [FINISHED, exited(0), CTRL_C])
def test_a_script_that_caught_the_stop_and_ended_early_ends_as_the_stop(ended):
    # Lightning on SIGTERM, a loop inside try/except KeyboardInterrupt: the script's own words
    # were about the stop torchdoctor handed it
    child = script(ended, measured=4)
    at_bound = decide_supervised(child, Stop(timed_out=True, max_seconds=10), measured=True)
    assert (at_bound.status, at_bound.exit_status, at_bound.cause) == (
        TIMED_OUT,
        EXIT_TIMED_OUT,
        "bound",
    )
    assert len(at_bound.notes) == 1 and "--max-seconds bound (10 s)" in at_bound.notes[0]
    on_signal = decide_supervised(child, Stop(signalled=signal.SIGTERM), measured=True)
    assert (on_signal.status, on_signal.exit_status) == (INTERRUPTED, EXIT_INTERRUPTED)
    if ended == CTRL_C:  # Ctrl-C handed on: the script's own words say it (no early end)
        assert on_signal is child
    # no stop handed on: the script's own ending stands
    assert decide_supervised(child, Stop(), measured=True) is child


def test_the_childs_own_ending_stands_when_it_is_more_than_an_early_end():
    stop = Stop(timed_out=True, max_seconds=10)
    for child in (script(STOPPED), script(RAISED, error="ValueError"), script(exited(2))):
        assert decide_supervised(child, stop, measured=True) is child
    # a rank torchdoctor stopped because a peer left: the stop's status, the peer's words kept
    lost = script(STOPPED, peer_lost="Connection closed by peer")
    cut = decide_supervised(lost, stop, measured=True)
    assert cut.status == TIMED_OUT and cut.notes[0] == lost.notes[0]
    # a whole run is cut by any stop, even one its script survived as complete
    whole = script(FINISHED, whole_steps=40)
    assert decide_supervised(whole, stop, measured=True, whole_run=True).status == TIMED_OUT


def test_a_signal_that_came_as_the_script_ended_keeps_its_status():
    child = script(STOPPED)
    late = decide_supervised(child, Stop(signalled=signal.SIGTERM, late=True), measured=True)
    assert (late.status, late.exit_status, late.cause) == (
        COMPLETE,
        EXIT_INTERRUPTED,
        "late-signal",
    )
    assert late.notes[-1].startswith("SIGTERM (signal 15) arrived as the script ended")


def test_a_run_interrupted_before_the_script_started():
    on_sigterm = decide_not_started(signal.SIGTERM)
    assert (on_sigterm.status, on_sigterm.exit_status) == (INTERRUPTED, EXIT_INTERRUPTED)
    assert on_sigterm.notes == [
        "torchdoctor received SIGTERM (signal 15) before the script started"
    ]
    assert decide_not_started(None).notes == ["interrupted before the script started"]


# -- a launched job ----------------------------------------------------------------------------


def test_a_jobs_ending_by_precedence():
    cause = {"cause_status": SCRIPT_ERROR, "cause_words": "rank 1 raised ValueError at step 4"}
    bound = decide_job(JobEnd(timed_out=True, max_seconds=9, signalled=2, **cause), True)
    assert (bound.status, bound.exit_status, bound.cause) == (TIMED_OUT, EXIT_TIMED_OUT, "bound")
    assert bound.notes == [
        "stopped at the --max-seconds bound (9 s)",
        "rank 1 raised ValueError at step 4; the launcher then ended the other ranks",
    ]
    assert bound.words == bound.notes[1]  # the failure leads the ending's words
    assert decide_job(JobEnd(signalled=signal.SIGTERM, **cause), True).status == INTERRUPTED
    raised = decide_job(JobEnd(**cause), True)
    assert (raised.status, raised.exit_status, raised.cause) == (
        SCRIPT_ERROR,
        EXIT_SCRIPT_ERROR,
        "rank-ended",
    )
    for own in (KILLED, INTERNAL_ERROR):  # a rank's own status says more than "an error"
        assert decide_job(JobEnd(cause_status=own, cause_words="rank 0 x"), True).status == own
    assert (
        decide_job(JobEnd(cause_status=PARTIAL, cause_words="rank 0 x"), True).status
        == SCRIPT_ERROR
    )
    other = decide_job(JobEnd(follower_without_cause=True, ranks_status=SCRIPT_ERROR), True)
    assert (other.status, other.cause) == (SCRIPT_ERROR, "other-node")


def test_a_job_whose_ranks_ended_differently_without_a_cause():
    uneven = JobEnd(follower_without_cause=True, uneven=True, ranks_status=SCRIPT_ERROR)
    assert decide_job(uneven, measured=True).status == PARTIAL  # uneven inputs: no one to blame
    ran_out = JobEnd(ranks_status=PARTIAL)
    assert decide_job(ran_out, measured=True).status == PARTIAL
    assert decide_job(ran_out, measured=False).status == NO_TRAINING
    assert decide_job(JobEnd(), measured=True) == Ending(COMPLETE, EXIT_OK, "measured", [], "")


def test_a_launcher_that_started_no_rank():
    assert decide_launcher(True, None, None, 60).status == TIMED_OUT
    assert decide_launcher(False, signal.SIGINT, None, None).status == INTERRUPTED
    failed = decide_launcher(False, None, 1, None)
    assert (failed.status, failed.exit_status, failed.cause) == (
        SCRIPT_ERROR,
        EXIT_SCRIPT_ERROR,
        "launcher",
    )


def test_the_precedence_orders_every_status_worst_first():
    assert sorted(STATUS_PRECEDENCE) == sorted(STATUSES)
    worst_first = [INTERNAL_ERROR, SCRIPT_ERROR, KILLED, TIMED_OUT, INTERRUPTED, PARTIAL]
    ranks = [Ending(status, 0, "measured") for status in worst_first]
    assert [e.precedence for e in ranks] == sorted(e.precedence for e in ranks)


# -- set on the record, then the verdict -------------------------------------------------------


def one_step_record() -> RunRecord:
    record = RunRecord(warmup_steps=3, requested_steps=20)
    record.steps.add_step({"data_wait": 1.0, "forward": 5.0, "backward": 8.0}, batches=1)
    return record


def test_settling_an_ending_replaces_the_notes_of_the_one_before():
    record = one_step_record()
    record.notes.append("the loader was found at train.py:12")
    child = script(FINISHED, measured=1)
    settle(record, child)
    assert record.notes[-1] == child.notes[0] and record.status == PARTIAL
    cut = decide_supervised(child, Stop(timed_out=True, max_seconds=5), measured=True)
    settle(record, cut)
    assert record.notes == ["the loader was found at train.py:12", cut.notes[0]]
    assert record.ending is cut and record.status == TIMED_OUT


@pytest.mark.parametrize(
    ("ending", "next_words"),
    [
        (Ending(TIMED_OUT, EXIT_TIMED_OUT, "bound"), "raise --max-seconds"),
        (Ending(INTERRUPTED, EXIT_INTERRUPTED, "signal"), "let the run measure a few more steps"),
        (Ending(KILLED, EXIT_SCRIPT_ERROR, "process-died"), "find what ended the process"),
        (Ending(PARTIAL, EXIT_OK, "script-end"), "give the run more data or epochs"),
    ],
)
def test_the_verdict_of_a_short_run_is_derived_after_its_status(ending, next_words):
    record = one_step_record()
    settle(record, script(FINISHED, measured=1))  # the child's: it ended on its own
    settle(record, ending)
    assert record.verdict is not None and record.verdict.next.startswith(next_words)


# -- a job combined from ranks that ended differently ------------------------------------------


def ended(record: RunRecord, ending: Ending) -> RunRecord:
    settle(record, ending, derive=False)
    return record


def test_a_job_whose_ranks_ended_differently_takes_the_worst_ending():
    from jobgen import rank_record
    from torchdoctor.analysis.distributed import combine, worst_status

    raised = script(RAISED, error="ValueError", measured=10)
    ran_out = script(FINISHED, measured=10)
    job = combine([ended(rank_record(0, 1.0, 3.0, None), ran_out),
                   ended(rank_record(1, 1.0, 3.0, None), raised)])  # fmt: skip
    assert job.status == SCRIPT_ERROR and job.ending == raised
    assert [r.status for r in job.distributed.ranks] == [PARTIAL, SCRIPT_ERROR]
    # records written before the ending was kept: the worst status alone
    assert worst_status([PARTIAL, KILLED, TIMED_OUT]) == KILLED
    assert worst_status([COMPLETE, COMPLETE]) == COMPLETE
    assert worst_status([COMPLETE, "a status of a later version"]) == PARTIAL  # type: ignore[list-item]


def test_the_launchers_decision_is_set_before_the_jobs_verdict():
    from jobgen import rank_record
    from torchdoctor.analysis.distributed import combine

    ranks = []
    for rank in (0, 1):
        record = rank_record(rank, 1.0, 3.0, None)
        for series in vars(record.steps).values():
            del series[2:]  # two steps each: too few for a verdict
        ranks.append(ended(record, script(FINISHED, measured=2)))
    bound = JobEnd(timed_out=True, max_seconds=20, ranks_status=PARTIAL)
    job = combine(ranks, ending=lambda job: decide_job(bound, bool(job.measured_steps)))
    assert job.status == TIMED_OUT and job.ending is not None and job.ending.cause == "bound"
    assert job.verdict is not None and "raise --max-seconds" in job.verdict.next, job.verdict


def test_a_run_that_ended_well_without_a_measured_step_trained_none():
    assert exit_status(COMPLETE, measured=True) == EXIT_OK
    assert exit_status(COMPLETE, measured=False) == EXIT_NO_TRAINING
    assert exit_status(PARTIAL, measured=False) == EXIT_NO_TRAINING
    assert exit_status(TIMED_OUT, measured=False) == EXIT_TIMED_OUT  # a failure says itself
    # a record written before the ending was kept: its status and steps decide
    assert exit_for(RunRecord(status=COMPLETE)) == EXIT_NO_TRAINING
    assert exit_for(one_step_record()) == EXIT_OK
    assert exit_for(ended(RunRecord(), script(CTRL_C, phase=phase_names.DONE))) == EXIT_INTERRUPTED


def test_the_ending_is_saved_with_the_record_and_an_older_record_loads_without_one():
    record = one_step_record()
    settle(record, decide_job(JobEnd(cause_status=KILLED, cause_words="rank 1 was killed"), True))
    loaded = RunRecord.from_dict(record.to_dict())
    assert loaded.ending == record.ending and loaded.status == KILLED
    older = record.to_dict()
    del older["ending"]  # written before the ending was kept: its status alone
    assert RunRecord.from_dict(older).ending is None and RunRecord.from_dict(older).status == KILLED
