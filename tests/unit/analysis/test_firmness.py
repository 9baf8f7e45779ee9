"""A verdict on a busy machine is firm only when the load could not have flipped it
(``analysis.firmness``): steps resampled that disagree, or torch's threads waiting for cores,
make it not firm, with its candidates and what to do; on a quiet machine it stands."""

from __future__ import annotations

from jobgen import rank_record
from torchdoctor.analysis.firmness import FIRM_AGREEMENT, resampled_kinds
from torchdoctor.analysis.verdict import decide, summarise
from torchdoctor.record import COMPUTE_BOUND, INPUT_BOUND, RunRecord, StepSeries, SystemUsage


def _record(steps: list[dict[str, float]], others: float | None, threads: int = 1) -> RunRecord:
    record = rank_record(0, 0.0, 1.0, None, world_size=1)
    record.steps = StepSeries()
    for parts in steps:
        record.steps.add_step(parts, 1)
    record.env.cpu_logical, record.env.torch_threads = 2, threads
    record.system = SystemUsage(0.2, 5, [90.0, 95.0], 92.5, 300.0, 0, 0.0, others_cpu_cores=others)
    return record


def _step(data_wait: float, compute: float) -> dict[str, float]:
    return {"data_wait": data_wait, "to_device": 0.0, "forward": compute / 2,
            "backward": compute / 2, "optimizer": 0.0, "other": 0.1}  # fmt: skip


#: The issue's GAN-style loop beside bursts of load: some steps input-heavy (quiet moments),
#: some with forward and backward slowed many times over (loaded ones).
MIXED = [_step(8.0, 4.0)] * 6 + [_step(8.0, 60.0)] * 4


def test_steps_that_disagree_on_a_busy_machine_give_no_firm_verdict():
    record = _record(MIXED, others=1.0)
    summarise(record)
    v = record.verdict
    assert not v.firm and set(v.candidates) == {INPUT_BOUND, COMPUTE_BOUND}, v
    assert v.candidates[0] == v.kind
    assert "not a firm answer: resampled, the measured steps give" in v.why
    assert v.next.startswith("run it again at a quieter moment, or with more --steps")
    assert "input fixes will not help" not in v.next


def test_the_same_steps_on_a_quiet_machine_stand():
    record = _record(MIXED, others=0.05)
    summarise(record)
    assert record.verdict.firm and record.verdict.candidates == []
    assert "not a firm answer" not in record.verdict.why


def test_compute_that_waited_for_cores_is_not_firm():
    # Steady steps, compute-bound every one: the resamples agree, but torch's 2 threads and the
    # other processes' 1.3 cores need more than the 2 there are.
    record = _record([_step(1.0, 20.0)] * 10, others=1.3, threads=2)
    summarise(record)
    v = record.verdict
    assert v.kind == COMPUTE_BOUND and not v.firm and v.candidates == [COMPUTE_BOUND]
    assert "torch's 2 threads shared 2 cores with other processes that took 1.3" in v.why
    assert "fewer threads (torchdoctor run --try threads measures them)" in v.next
    assert "input fixes will not help" not in v.next
    # One thread fits beside them: the verdict stands, and says input fixes will not help.
    record = _record([_step(1.0, 20.0)] * 10, others=0.6, threads=1)
    summarise(record)
    assert record.verdict.firm and "input fixes will not help" in record.verdict.next


def test_steady_steps_agree_in_every_resample():
    counts = resampled_kinds(_record([_step(8.0, 4.0)] * 10, others=1.0), decide)
    assert counts == {INPUT_BOUND: sum(counts.values())}
    assert FIRM_AGREEMENT < 1.0


def test_the_reports_say_a_verdict_is_not_firm():
    from torchdoctor.report._words import firm_words

    record = _record(MIXED, others=1.0)
    summarise(record)
    other = next(k for k in record.verdict.candidates if k != record.verdict.kind)
    assert firm_words(record.verdict) == (
        f"not firm: the load on this machine could have decided it; it could also be {other} "
        "(see Why)"
    )
    record = _record(MIXED, others=0.0)
    summarise(record)
    assert firm_words(record.verdict) == ""
    from torchdoctor.report.html import record_body

    assert 'id="not-firm"' not in record_body(record, "quiet")
    record = _record(MIXED, others=1.0)
    summarise(record)
    assert 'id="not-firm"' in record_body(record, "busy")


def _waited(record: RunRecord, share: float) -> RunRecord:
    """The record's training thread measured waiting for a core ``share`` of its steps' time."""
    from torchdoctor.record import ThreadWaits

    window = sum(record.steps.step_ms) / 1e3
    record.system.waits = ThreadWaits(window, window / 2, window * share, window, window * share)
    return record


def test_time_measured_waiting_for_a_core_makes_any_verdict_on_a_busy_machine_not_firm():
    # Input-bound in every step, and the resamples agree: the training thread's run-queue time
    # says 40% of the steps was the busy machine's.
    record = _waited(_record([_step(8.0, 4.0)] * 10, others=0.6, threads=1), 0.4)
    summarise(record)
    v = record.verdict
    assert v.kind == INPUT_BOUND and not v.firm and v.candidates == [INPUT_BOUND], v
    assert "the training thread waited for a core 4.8 ms of each 12.1 ms step (40%" in v.why
    assert "waiting is no part's work, not the model's compute" in v.why
    assert "fewer threads" in v.next
    # waiting under the threshold leaves it firm; on a quiet machine it is not asked
    record = _waited(_record([_step(8.0, 4.0)] * 10, others=0.6, threads=1), 0.05)
    summarise(record)
    assert record.verdict.firm, record.verdict
    record = _waited(_record([_step(8.0, 4.0)] * 10, others=0.1, threads=1), 0.4)
    summarise(record)
    assert record.verdict.firm


def test_measured_waiting_overrides_the_threads_and_cores_inference():
    # torch's 2 threads beside 1.3 cores of others would be inferred waiting; the kernel says
    # the training thread hardly waited: the verdict stands.
    record = _waited(_record([_step(1.0, 20.0)] * 10, others=1.3, threads=2), 0.02)
    summarise(record)
    assert record.verdict.kind == COMPUTE_BOUND and record.verdict.firm, record.verdict


def test_steps_too_short_for_the_cpu_counters_are_judged_by_the_threads_measured_waiting():
    # Beside a busy-looping process, 3 steps of a 1 ms loop: the others' load unmeasured (under
    # half a second of steps), the training thread waiting for a core 35% of their time. The
    # resamples agree; the waiting alone makes the verdict not firm, and says why.
    record = _waited(_record([_step(8.0, 4.0)] * 3, others=None, threads=2), 0.35)
    summarise(record)
    v = record.verdict
    assert v.kind == INPUT_BOUND and not v.firm and v.candidates == [INPUT_BOUND], v
    assert (
        "not a firm answer: the load on the machine went unmeasured (the measured steps took "
        "under 0.5 s, too little for its CPU counters), so other processes or the script's own "
        "threads may have kept it waiting: the training thread waited for a core"
    ) in v.why
    assert "fewer threads" in v.next and v.why.count("went unmeasured") == 1
    # fewer steps than a verdict needs: it says so itself, and nothing of the load
    record = _waited(_record([_step(8.0, 4.0)] * 2, others=None, threads=2), 0.35)
    summarise(record)
    assert "went unmeasured" not in record.verdict.why
    # a share of a window so short that one preemption reaches it (under a millisecond in all)
    record = _waited(_record([_step(0.2, 0.1)] * 3, others=None, threads=2), 0.35)
    summarise(record)
    assert record.verdict.firm, record.verdict
    # waiting under the threshold, or no waiting read: it stands, and nothing is said of the load
    for waited in (0.05, None):
        record = _record([_step(8.0, 4.0)] * 3, others=None, threads=2)
        if waited is not None:
            _waited(record, waited)
        summarise(record)
        assert record.verdict.firm and "went unmeasured" not in record.verdict.why
