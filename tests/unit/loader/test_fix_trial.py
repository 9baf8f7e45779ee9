"""The ``--fix`` trial: the settings to inject, the code, the prediction, and the re-run."""

from __future__ import annotations

import pytest
from test_advice import ISSUE_CASE, settings, sweep_of, threaded_sweep

from torchdoctor.loader import (
    counted_batches,
    fix_code,
    fix_settings,
    fix_threads,
    fix_trial,
    predicted_speedup,
    predicted_step_ms,
    sweep_advice,
    warm_batches,
)
from torchdoctor.record import RunRecord, Stat, SweepPoint


def test_fix_settings_and_code_from_findings():
    slow_start = SweepPoint(4, 20.0, first_batch_ms=2000.0)
    sweep = sweep_of([(0, 5.0), (1, 5.0), (2, 10.0), slow_start], best=4)
    findings = sweep_advice(sweep, settings(), accelerator=True, batches_per_epoch=50)
    injected = fix_settings(findings)
    assert injected == {"num_workers": 4, "pin_memory": True, "persistent_workers": True}
    assert fix_code(injected) == (
        "DataLoader(..., num_workers=4, pin_memory=True, persistent_workers=True)"
    )
    back_to_zero = sweep_of([(0, 100.0), (1, 50.0), (2, 60.0)], best=0)
    injected = fix_settings(
        sweep_advice(back_to_zero, settings(num_workers=2, prefetch_factor=2), accelerator=False)
    )
    assert injected == {"num_workers": 0, "persistent_workers": False, "prefetch_factor": None}
    assert fix_settings([]) == {} and fix_code({}) == ""


def test_predicted_step_time():
    # No workers: 50 ms of model + 100 ms to make the batch, one after the other.
    assert predicted_step_ms(50.0, 10.0, num_workers=0) == pytest.approx(150.0)
    # Workers make batches in parallel: the slower side bounds the step.
    assert predicted_step_ms(50.0, 10.0, num_workers=2) == pytest.approx(100.0)
    assert predicted_step_ms(50.0, 40.0, num_workers=4) == pytest.approx(50.0)
    # Gradient accumulation draws 4 batches per step.
    assert predicted_step_ms(50.0, 40.0, num_workers=4, batches_per_step=4) == pytest.approx(100.0)


def first_run(findings, step_ms: float = 100.0, ceiling: float | None = None) -> RunRecord:
    loader = settings()
    loader.created_at = "train.py:12"
    return RunRecord(
        loader=loader,
        step_ms=Stat.of([step_ms]),
        ceiling_speedup=ceiling,
        findings=findings,
    )


class FakeRerun:
    """Records what the trial asks for; the script as it is (nothing injected) steps in
    ``before_ms``, fixed in ``step_ms`` (each a list of steps, or one mean)."""

    def __init__(self, step_ms, before_ms=100.0) -> None:
        self.step_ms, self.before_ms = step_ms, before_ms
        self.calls: list[tuple[dict, int, int]] = []
        self.threads: list[int | None] = []

    def __call__(self, overrides: dict, steps: int, warmup: int, threads: int | None) -> RunRecord:
        self.calls.append((dict(overrides), steps, warmup))
        self.threads.append(threads)
        after = RunRecord(loader_overrides=dict(overrides), threads_override=threads)
        ms = self.before_ms if not overrides and threads is None else self.step_ms
        if isinstance(ms, list):
            for step in ms:
                after.steps.add_step({"other": step}, 1)
        after.step_ms = Stat.of(ms if isinstance(ms, list) else [ms]) if ms is not None else None
        return after

    @property
    def fixed_calls(self) -> list[tuple[dict, int, int]]:
        return [c for c, t in zip(self.calls, self.threads) if c[0] or t is not None]


def test_trial_reruns_with_the_advice_over_whole_rounds_and_verifies():
    slow_start = SweepPoint(4, 20.0, first_batch_ms=2000.0)
    sweep = sweep_of([(0, 5.0), (1, 5.0), (2, 10.0), slow_start], best=4)
    record = first_run(sweep_advice(sweep, settings(), accelerator=False, batches_per_epoch=50))
    rerun = FakeRerun(step_ms=25.0)
    trial = fix_trial(record, rerun, steps=6, warmup=2)
    # Two rounds: the script as it is, then fixed, alternately, over the same window.
    assert [c[0] for c in rerun.calls] == [{}, trial.overrides] * 2
    assert len({c[1:] for c in rerun.calls}) == 1
    overrides, steps, warmup = rerun.calls[1]
    assert overrides == {"num_workers": 4, "persistent_workers": True} == trial.overrides
    # 4 rounds of 4 workers at least, and the 4 x 2 prefetched batches skipped.
    assert steps == counted_batches(4, 16) == 16 and warmup == warm_batches(4) == 8
    assert trial.verified.speedup == pytest.approx(4.0) and trial.after_step_ms == 25.0
    assert (
        trial.verified.judgement == "IMPROVED"
        and trial.rounds == 2
        and trial.before_step_ms == 100.0
    )
    assert trial.predicted_speedup == pytest.approx(4.0)  # 20 / 5 batches/s, loader alone
    assert trial.where == "train.py:12"
    assert trial.code == "DataLoader(..., num_workers=4, persistent_workers=True)"
    assert trial.after is not None and trial.after.loader_overrides == overrides


def test_trial_keeps_the_first_runs_length_when_it_is_longer():
    sweep = sweep_of([(0, 5.0), (1, 9.0), (2, 10.0)], best=1)
    record = first_run(sweep_advice(sweep, settings(), accelerator=False))
    rerun = FakeRerun(step_ms=60.0)
    fix_trial(record, rerun, steps=20, warmup=5)
    assert {c[1:] for c in rerun.calls} == {(20, 5)}


def test_nothing_to_inject_runs_nothing():
    rerun = FakeRerun(step_ms=1.0)
    trial = fix_trial(first_run([]), rerun, steps=6, warmup=2)
    assert rerun.calls == [] and trial.overrides == {} and trial.after is None
    assert trial.code is None and trial.verified is None


def test_a_rerun_without_steps_is_not_verified():
    sweep = sweep_of([(0, 5.0), (1, 9.0), (2, 10.0)], best=1)
    record = first_run(sweep_advice(sweep, settings(), accelerator=False))
    trial = fix_trial(record, FakeRerun(step_ms=None), steps=6, warmup=2)
    assert trial.after is not None and trial.verified is None


def test_a_faster_loader_cannot_beat_the_model_unless_whole_steps_were_measured():
    sweep = sweep_of([(0, 5.0), (1, 5.0), (2, 10.0), (4, 20.0)], best=4)
    advice = sweep_advice(sweep, settings(), accelerator=False)
    assert predicted_speedup(first_run(advice, ceiling=2.5)) == pytest.approx(2.5)
    steps = sweep_of([(0, 5.0), (1, 5.0), (2, 10.0), (4, 20.0)], best=4, measures="step")
    advice = sweep_advice(steps, settings(), accelerator=False)
    assert predicted_speedup(first_run(advice, ceiling=2.5)) == pytest.approx(4.0)
    assert predicted_speedup(first_run([])) is None


def test_the_threads_of_the_pick_are_injected_with_the_workers():
    sweep = threaded_sweep(ISSUE_CASE, best=(2, 1))
    record = first_run(sweep_advice(sweep, settings(), accelerator=False))
    assert fix_threads(record.findings) == 1
    rerun = FakeRerun(step_ms=60.0)
    trial = fix_trial(record, rerun, steps=6, warmup=2)
    assert rerun.fixed_calls[0][0] == {"num_workers": 2} and rerun.threads == [None, 1] * 2
    assert trial.threads == 1 and trial.after.threads_override == 1
    assert trial.code == "DataLoader(..., num_workers=2)\ntorch.set_num_threads(1)"
    assert trial.predicted_speedup == pytest.approx(38.0 / 21.7, abs=1e-3)


def test_threads_alone_are_a_fix_to_verify():
    sweep = threaded_sweep(ISSUE_CASE, best=(2, 1))
    record = first_run(sweep_advice(sweep, settings(num_workers=2), accelerator=False))
    rerun = FakeRerun(step_ms=50.0)
    trial = fix_trial(record, rerun, steps=6, warmup=2)
    assert trial.overrides == {} and rerun.threads == [None, 1] * 2 and trial.threads == 1
    assert trial.code == "torch.set_num_threads(1)" and trial.verified.speedup == 2.0
    assert fix_code({}, None) == "" and fix_threads([]) is None


def noisy(mean: float, n: int = 12) -> list[float]:
    """Steps around ``mean``, spread by a fifth either way."""
    return [mean * (0.8 + 0.4 * (i % 4) / 3) for i in range(n)]


def test_a_gain_within_the_noise_is_no_clear_gain_and_earns_more_rounds():
    sweep = sweep_of([(0, 5.0), (1, 9.0), (2, 10.0)], best=1)
    record = first_run(sweep_advice(sweep, settings(), accelerator=False))
    # 1.05x: inside the 10% two runs of one script may differ by.
    rerun = FakeRerun(step_ms=noisy(95.0), before_ms=noisy(100.0))
    trial = fix_trial(record, rerun, steps=6, warmup=2)
    assert trial.verified.judgement == "NO CHANGE" and trial.rounds == 2, (
        "no budget: two rounds only"
    )
    ticks = iter(range(0, 1000, 10))  # each call of the clock: 10 s later
    trial = fix_trial(record, FakeRerun(noisy(95.0), noisy(100.0)), steps=6, warmup=2,
                      budget_s=500.0, clock=lambda: float(next(ticks)))  # fmt: skip
    assert trial.verified.judgement == "NO CHANGE" and trial.rounds == 4, (
        "unclear: rounds up to the most"
    )
    lo, hi = trial.verified.interval
    assert lo <= trial.verified.speedup <= hi and trial.verified.allowance >= 0.10


def test_a_clear_gain_takes_two_rounds_and_a_slower_fix_is_said_so():
    sweep = sweep_of([(0, 5.0), (1, 9.0), (2, 10.0)], best=1)
    record = first_run(sweep_advice(sweep, settings(), accelerator=False))
    trial = fix_trial(record, FakeRerun(noisy(40.0), noisy(100.0)), steps=6, warmup=2,
                      budget_s=1e9)  # fmt: skip
    assert trial.verified.judgement == "IMPROVED" and trial.rounds == 2
    assert trial.verified.low > 1.0
    slower = fix_trial(record, FakeRerun(noisy(150.0), noisy(100.0)), steps=6, warmup=2)
    assert slower.verified.judgement == "REGRESSED" and slower.verified.speedup < 1.0


def test_load_that_slows_a_whole_pair_does_not_hide_the_gain_each_pair_shows():
    # Beside a busy process the second pair ran 1.9x slower, both its runs: each pair still
    # shows the fix 1.6x faster; judged by how far each side's runs are apart it was unclear.
    sweep = sweep_of([(0, 5.0), (1, 9.0), (2, 10.0)], best=1)
    record = first_run(sweep_advice(sweep, settings(), accelerator=False))
    slowness = iter([1.0, 1.0, 1.9, 1.9])

    class Slowed(FakeRerun):
        def __call__(self, overrides, steps, warmup, threads):
            run = super().__call__(overrides, steps, warmup, threads)
            factor = next(slowness)
            run.steps.step_ms = [ms * factor for ms in run.steps.step_ms]
            return run

    trial = fix_trial(record, Slowed([62.5] * 12, [100.0] * 12), steps=6, warmup=2)
    assert trial.rounds == 2 and trial.verified.judgement == "IMPROVED", trial
    assert trial.verified.allowance == pytest.approx(0.10)
