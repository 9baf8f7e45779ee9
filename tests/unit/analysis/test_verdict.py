"""The verdict from synthetic records: each threshold decides as documented."""

from __future__ import annotations

import pytest

from torchdoctor.analysis.verdict import (
    COMPUTE_BOUND,
    HOST_BOUND,
    INPUT_BOUND,
    INPUT_BOUND_CEILING,
    INPUT_BOUND_SHARE,
    UNKNOWN,
    summarise,
)
from torchdoctor.record import (
    IMPROVED,
    JudgedSpeedup,
    LoaderAlone,
    LoaderReport,
    LoaderSettings,
    RunRecord,
    StepSeries,
    SweepPoint,
    WorkerSweep,
)


def _loader(workers=0):
    return LoaderSettings(
        "D", 100, 8, workers, False, False, None, False, "BatchSampler", "default_collate"
    )


def _record(data_wait, forward, other, n=5, model_alone=None, workers=0, loader=True):
    steps = StepSeries()
    for _ in range(n):
        parts = {
            "data_wait": data_wait,
            "to_device": 0.0,
            "forward": forward,
            "backward": forward,
            "optimizer": 1.0,
            "other": other,
        }
        for k, v in parts.items():
            steps.part(k).append(v)
        steps.step_ms.append(sum(parts.values()))
        steps.batches.append(1)
    rec = RunRecord(steps=steps, model_alone=[model_alone] * n if model_alone else [])
    if loader:
        rec.loader = _loader(workers)
        rec.seen = {"batches": n}
    summarise(rec)
    return rec


def test_input_bound_at_threshold_share():
    # data wait share just above the threshold
    total_rest = 2 * 10 + 1 + 1
    wait = INPUT_BOUND_SHARE / (1 - INPUT_BOUND_SHARE) * total_rest * 1.05
    assert _record(wait, 10, 1).verdict.kind == INPUT_BOUND
    assert _record(wait * 0.8, 10, 1).verdict.kind == COMPUTE_BOUND


def test_ceiling_with_workers_makes_input_bound():
    rec = _record(0.5, 10, 1, model_alone=22.5 / INPUT_BOUND_CEILING / 1.1, workers=2)
    assert rec.ceiling_speedup > INPUT_BOUND_CEILING
    assert rec.verdict.kind == INPUT_BOUND
    assert "compete with the model for CPU" in rec.verdict.why
    # The same ceiling over a loop that barely waits, without workers, is noise.
    assert _record(0.5, 10, 1, model_alone=15, workers=0).verdict.kind == COMPUTE_BOUND


def test_a_ceiling_the_load_made_is_not_taken():
    # Measured steps of 22.5 ms beside a busy process, the model alone at 15.7 ms once it had
    # gone (1.43x: input-bound with workers). The script's steps right after the model-alone
    # ones, as quiet, took 16 ms: the ceiling was the load's, and its interval now spans 1.0.
    rec = _record(0.5, 10, 1, model_alone=22.5 / INPUT_BOUND_CEILING / 1.1, workers=2)
    assert rec.verdict.kind == INPUT_BOUND
    rec.measured_after = [16.0, 16.2, 15.9, 16.1]
    summarise(rec)
    assert rec.ceiling_interval[0] < 1.05 < INPUT_BOUND_CEILING < rec.ceiling_interval[1]
    assert rec.verdict.kind == COMPUTE_BOUND
    # The same steps after as before: the bracket agrees, and the ceiling stands.
    rec.measured_after = [22.5, 22.4, 22.6, 22.5]
    summarise(rec)
    assert rec.ceiling_interval[0] > INPUT_BOUND_CEILING and rec.verdict.kind == INPUT_BOUND


def test_ceiling_without_workers_decides_when_the_loop_waits():
    # 22% of the step in the wait (below the share threshold), and a 1.48x ceiling: the input
    # bounds the run (a loop decoding large JPEGs in the main process), and the words say why.
    rec = _record(6.4, 10, 1, model_alone=29.4 / 1.48, workers=0)
    assert rec.verdict.shares["input"] < INPUT_BOUND_SHARE
    assert rec.verdict.kind == INPUT_BOUND
    assert "more than the wait shows" in rec.verdict.why
    assert "compete" not in rec.verdict.why
    # Without the ceiling the same shares are compute-bound.
    assert _record(6.4, 10, 1, workers=0).verdict.kind == COMPUTE_BOUND


def test_no_bound_is_named_for_a_group_that_does_not_lead():
    # The input leads (no loader seen: batches came from elsewhere), compute does not.
    rec = _record(20, 2, 5, loader=False)
    assert rec.verdict.shares["compute"] < rec.verdict.shares["input"]
    assert rec.verdict.kind == INPUT_BOUND


def test_a_script_that_trains_in_processes_of_its_own_is_said_so():
    rec = RunRecord(steps=StepSeries())
    rec.seen = {"processes_started": 2, "optimizer_steps": 0, "backward_calls": 0}
    summarise(rec)
    assert rec.verdict.kind == UNKNOWN
    assert "started 2 process(es)" in rec.verdict.why
    assert "optimizer.step()" not in rec.verdict.next


def test_host_bound():
    rec = _record(0.0, 5, 30)
    assert rec.verdict.kind == HOST_BOUND
    assert rec.verdict.shares["host"] == pytest.approx(30 / 41, abs=1e-3)


def test_input_and_host_both_high_picks_larger():
    assert _record(40, 2, 30).verdict.kind == INPUT_BOUND
    assert _record(30, 2, 40).verdict.kind == HOST_BOUND


def test_no_loader_is_never_input_bound():
    rec = _record(0.0, 2, 30, loader=False)
    assert rec.verdict.kind == HOST_BOUND
    assert "builds its batches itself" in rec.verdict.why


def test_ceiling_and_needed_rate():
    rec = _record(30, 10, 1, model_alone=25)
    rec.loader_alone = LoaderAlone(
        batches=5, seconds=1.0, batches_per_s=20.0, needed_batches_per_s=None
    )
    summarise(rec)
    assert rec.ceiling_speedup == pytest.approx(52 / 25, rel=1e-3)
    assert rec.loader_alone.needed_batches_per_s == pytest.approx(40.0)
    assert "the model consumes 40.0" in rec.verdict.why


def test_nothing_measured():
    rec = RunRecord()
    summarise(rec)
    assert rec.verdict.kind == UNKNOWN


def test_next_follows_a_sweep_that_found_no_gain():
    rec = _record(40, 5, 1)
    rec.loader_report = LoaderReport(
        worker_sweep=WorkerSweep(
            points=[SweepPoint(0, 10.0)], best_workers=0, stopped="exhausted", candidates=[0]
        )
    )
    summarise(rec)
    assert "workers do not pay here" in rec.verdict.next
    assert "num_workers=N" not in rec.verdict.next


def test_a_script_that_failed_is_told_about_its_error_not_optimizer_step():
    rec = RunRecord(steps=StepSeries())
    rec.status = "script-error"
    summarise(rec)
    assert rec.verdict.kind == UNKNOWN
    assert "failed" in rec.verdict.why
    assert "optimizer.step()" not in rec.verdict.next


def test_derive_reads_the_record_and_summarise_writes_what_it_found():
    from torchdoctor.analysis.verdict import derive

    rec = _record(30.0, 10.0, 1.0, model_alone=12.0)
    rec.loader_alone = LoaderAlone(20, 0.4, 50.0, needed_batches_per_s=None)
    fresh = RunRecord.from_dict(rec.to_dict())
    for name in ("step_ms", "parts_ms", "model_alone_step_ms", "verdict"):
        setattr(fresh, name, None if name != "parts_ms" else {})
    fresh.ceiling_speedup, fresh.ceiling_interval = None, []
    before = fresh.to_dict()
    derived = derive(fresh)
    assert fresh.to_dict() == before  # derive changed nothing
    assert derived.verdict.kind == INPUT_BOUND and derived.ceiling_speedup > 3
    assert derived.needed_batches_per_s == pytest.approx(1000 / 12.0, rel=1e-3)
    summarise(fresh)
    assert fresh.verdict == derived.verdict and fresh.ceiling_speedup == derived.ceiling_speedup
    assert fresh.step_ms == derived.step_ms and fresh.parts_ms == derived.parts_ms
    assert fresh.loader_alone.needed_batches_per_s == derived.needed_batches_per_s


def test_the_trials_asked_for_follow_the_advice_whatever_bounds_the_loop():
    from torchdoctor.record import Trial

    bigger = Trial(
        "batch-size", "batch 16", judged=JudgedSpeedup(2.6, 2.2, 3.0, 0.1, IMPROVED), pick="16"
    )
    for wait, bound in ((30.0, INPUT_BOUND), (0.0, COMPUTE_BOUND)):
        rec = _record(wait, 10.0, 1.0)
        rec.trials = [bigger]
        summarise(rec)
        assert rec.verdict.kind == bound
        assert "batch-size 2.60x" in rec.verdict.next and "--try" not in rec.verdict.next
    rec = _record(30.0, 10.0, 1.0)  # no trial asked for: the input advice alone
    assert "measured trials" not in rec.verdict.next and "--try" not in rec.verdict.next


def test_a_script_already_under_autocast_is_not_advised_autocast():
    plain = _record(0.1, 20, 0.5)
    assert plain.verdict.kind == COMPUTE_BOUND
    assert "mixed precision (torch.autocast)" in plain.verdict.next
    steps = plain.steps
    rec = RunRecord(
        steps=steps, loader=_loader(), seen={"batches": 5, "autocast_dtype": "bfloat16"}
    )
    summarise(rec)
    assert rec.verdict.kind == COMPUTE_BOUND
    assert "mixed precision" not in rec.verdict.next
    assert rec.verdict.next.startswith(
        "make the model's work cheaper (its forward already runs under torch.autocast, "
        "bfloat16): torch.compile"
    )
