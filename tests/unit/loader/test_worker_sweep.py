"""The worker sweep's candidates, stop rule, pick and advice, driven by fake throughputs."""

from __future__ import annotations

import pytest

from torchdoctor.analysis.worker_sweep import (
    MAX_SWEEP_WORKERS,
    PLATEAU_GAIN,
    TARGET_HEADROOM,
    SweepPoint,
    SweepPolicy,
    WorkerSweep,
    max_sweep_workers,
    sweep_advice,
    sweep_candidates,
)
from torchdoctor.record import LoaderSettings


def io_bound(per_batch_s: float, saturates_at: int):
    """Batches/s of a loader whose batches take ``per_batch_s`` each and scale with workers."""

    def throughput(workers: int) -> float:
        return max(1, min(workers, saturates_at)) / per_batch_s

    return throughput


def run(policy: SweepPolicy, throughput) -> list[int]:
    measured = []
    while (n := policy.next()) is not None:
        measured.append(n)
        policy.add(n, throughput(n))
    return measured


def settings(**kw) -> LoaderSettings:
    base = dict(
        dataset="D",
        dataset_len=1000,
        batch_size=32,
        num_workers=0,
        pin_memory=False,
        persistent_workers=False,
        prefetch_factor=None,
        drop_last=False,
        sampler="SequentialSampler",
        collate_fn="default_collate",
    )
    base.update(kw)
    return LoaderSettings(**base)


def test_candidates_double_up_to_twice_the_cpus():
    assert sweep_candidates(2, 0) == [0, 1, 2, 4]
    assert sweep_candidates(6, 0) == [0, 1, 2, 4, 8, 12]
    assert sweep_candidates(8, 3) == [0, 1, 2, 3, 4, 8, 16]
    assert sweep_candidates(1, 0) == [0, 1, 2]
    assert max(sweep_candidates(128, 0)) == MAX_SWEEP_WORKERS == max_sweep_workers(128)


def test_current_setting_is_measured_even_above_the_bound():
    assert sweep_candidates(2, 16) == [0, 1, 2, 4, 16]


def test_sweep_stops_on_a_plateau_and_pick_is_within_10_percent_of_exhaustive():
    throughput = io_bound(0.5, saturates_at=4)
    candidates = sweep_candidates(16, 0)  # 0 1 2 4 8 16 32
    policy = SweepPolicy(candidates)
    measured = run(policy, throughput)
    assert policy.stopped == "plateau"
    assert measured == [0, 1, 2, 4, 8]  # 8 does not beat 4: stop before 16 and 32
    exhaustive_best = max(throughput(n) for n in candidates)
    assert throughput(policy.best()) >= 0.9 * exhaustive_best
    assert policy.best() == 4  # the fewest workers at the best rate


def test_one_worker_no_faster_than_none_is_not_a_plateau():
    # In the loader-alone sweep one worker only moves the work; the second doubles it.
    rates = {0: 10.0, 1: 10.0, 2: 20.0, 4: 40.0, 8: 41.0}
    policy = SweepPolicy([0, 1, 2, 4, 8])
    assert run(policy, rates.__getitem__) == [0, 1, 2, 4, 8]
    assert policy.best() == 4


def test_decline_stops_and_zero_workers_can_win():
    # A trivial dataset: inter-process transfer costs more than making the batch.
    rates = {0: 100.0, 1: 60.0, 2: 70.0, 4: 75.0}
    policy = SweepPolicy([0, 1, 2, 4])
    assert run(policy, rates.__getitem__) == [0, 1, 2]
    assert policy.stopped == "plateau"
    assert policy.best() == 0


def test_patience_allows_one_miss():
    rates = {0: 10.0, 1: 10.0, 2: 20.0, 4: 21.0, 8: 40.0, 16: 40.0}
    strict = SweepPolicy(list(rates))
    assert run(strict, rates.__getitem__) == [0, 1, 2, 4]
    patient = SweepPolicy(list(rates), patience=2)
    assert run(patient, rates.__getitem__) == [0, 1, 2, 4, 8, 16]
    assert patient.best() == 8


def test_gain_just_below_threshold_is_a_plateau():
    rates = {0: 10.0, 1: 10.0, 2: 10.0 * (1 + PLATEAU_GAIN) - 0.01, 4: 100.0}
    policy = SweepPolicy(list(rates))
    assert run(policy, rates.__getitem__) == [0, 1, 2]


def test_target_rate_stops_the_sweep_once_the_model_is_the_bound():
    throughput = io_bound(0.1, saturates_at=32)  # 10 batches/s per worker
    policy = SweepPolicy(sweep_candidates(16, 0), target_batches_per_s=25.0)
    measured = run(policy, throughput)
    assert policy.stopped == "target"
    assert measured == [0, 1, 2, 4]  # 40/s >= 25 * 1.2
    assert throughput(4) >= 25.0 * TARGET_HEADROOM
    assert policy.best() == 4


def test_best_picks_fewest_workers_within_tolerance():
    policy = SweepPolicy([0, 1, 2, 4, 8], patience=9)
    for n, rate in [(0, 10.0), (1, 11.0), (2, 19.0), (4, 20.0), (8, 19.5)]:
        policy.add(n, rate)
    assert policy.best(0.0) == 4
    assert policy.best(0.05) == 2  # 19 >= 0.95 * 20
    assert policy.best(0.5) == 0


def test_add_rejects_nonsense():
    policy = SweepPolicy([0])
    with pytest.raises(ValueError):
        policy.add(0, float("nan"))
    with pytest.raises(ValueError):
        policy.best()


def sweep_of(points, best, measures="loader") -> WorkerSweep:
    return WorkerSweep(
        points=[SweepPoint(*p) if isinstance(p, tuple) else p for p in points],
        best_workers=best,
        stopped="plateau",
        candidates=[p[0] if isinstance(p, tuple) else p.num_workers for p in points],
        measures=measures,
    )


def kinds(findings):
    return [f.kind for f in findings]


def test_advice_num_workers_with_speedup_and_exact_code():
    sweep = sweep_of([(0, 5.0), (1, 5.0), (2, 10.0), (4, 19.0), (8, 19.5)], best=4)
    findings = sweep_advice(sweep, settings(), accelerator=False, batches_per_epoch=1000)
    (nw,) = [f for f in findings if f.kind == "loader.num_workers"]
    assert nw.fix == "DataLoader(..., num_workers=4)"
    assert nw.detail["predicted_speedup"] == pytest.approx(19.0 / 5.0)
    assert nw.severity == "warning"
    assert "loader.pin_memory" not in kinds(findings)  # CPU model: pinning is useless


def test_no_num_workers_advice_when_already_best_or_gain_is_small():
    sweep = sweep_of([(0, 5.0), (1, 5.0), (2, 10.0), (4, 10.4)], best=2)
    assert "loader.num_workers" not in kinds(
        sweep_advice(sweep, settings(num_workers=2), accelerator=False)
    )
    sweep = sweep_of([(0, 10.0), (1, 10.0), (2, 10.5)], best=2)
    assert "loader.num_workers" not in kinds(sweep_advice(sweep, settings(), accelerator=False))


def test_going_back_to_zero_workers_drops_worker_only_arguments():
    sweep = sweep_of([(0, 100.0), (1, 50.0), (2, 60.0), (4, 61.0)], best=0)
    findings = sweep_advice(
        sweep,
        settings(num_workers=4, persistent_workers=True, prefetch_factor=2),
        accelerator=False,
    )
    (nw,) = [f for f in findings if f.kind == "loader.num_workers"]
    assert (
        nw.fix == "DataLoader(..., num_workers=0, persistent_workers=False, prefetch_factor=None)"
    )


def test_pin_memory_only_with_an_accelerator():
    sweep = sweep_of([(0, 5.0), (1, 5.0), (2, 5.1)], best=0)
    assert "loader.pin_memory" in kinds(sweep_advice(sweep, settings(), accelerator=True))
    assert "loader.pin_memory" not in kinds(
        sweep_advice(sweep, settings(pin_memory=True), accelerator=True)
    )


def test_persistent_workers_when_startup_is_a_large_share_of_a_short_epoch():
    slow_start = SweepPoint(4, 20.0, first_batch_ms=2000.0)
    sweep = sweep_of([(0, 5.0), (1, 5.0), (2, 10.0), slow_start], best=4)
    # 50 batches at 20/s = 2.5 s per epoch; 2 s of startup is 44%.
    f = sweep_advice(sweep, settings(), accelerator=False, batches_per_epoch=50)
    (pw,) = [x for x in f if x.kind == "loader.persistent_workers"]
    assert pw.fix == "DataLoader(..., num_workers=4, persistent_workers=True)"
    # 100,000 batches: startup is negligible.
    f = sweep_advice(sweep, settings(), accelerator=False, batches_per_epoch=100_000)
    assert "loader.persistent_workers" not in kinds(f)
    # Already persistent.
    f = sweep_advice(
        sweep, settings(persistent_workers=True), accelerator=False, batches_per_epoch=50
    )
    assert "loader.persistent_workers" not in kinds(f)


def test_persistent_workers_falls_back_to_epoch_length_without_startup_time():
    sweep = sweep_of([(0, 5.0), (1, 5.0), (2, 10.0), (4, 20.0)], best=4)
    assert "loader.persistent_workers" in kinds(
        sweep_advice(sweep, settings(), accelerator=False, batches_per_epoch=20)
    )
    assert "loader.persistent_workers" not in kinds(
        sweep_advice(sweep, settings(), accelerator=False, batches_per_epoch=None)
    )


def test_prefetch_factor_raised_for_uneven_batches_and_lowered_for_ram():
    jittery = SweepPoint(0, 5.0, batch_ms_median=100.0, batch_ms_p90=400.0)
    sweep = sweep_of([jittery, (1, 5.0), (2, 10.0), (4, 20.0)], best=4)
    f = sweep_advice(sweep, settings(), accelerator=False)
    (pf,) = [x for x in f if x.kind == "loader.prefetch_factor"]
    assert pf.fix == "DataLoader(..., num_workers=4, prefetch_factor=4)"

    steady = SweepPoint(0, 5.0, batch_ms_median=100.0, batch_ms_p90=120.0)
    sweep = sweep_of([steady, (1, 5.0), (2, 10.0), (4, 20.0)], best=4)
    assert "loader.prefetch_factor" not in kinds(sweep_advice(sweep, settings(), accelerator=False))
    # 4 workers x 2 batches x 500 MB = 4 GB in flight with 8 GB free: lower to 1.
    f = sweep_advice(
        sweep,
        settings(),
        accelerator=False,
        bytes_per_batch=500 * 2**20,
        available_ram_bytes=8 * 2**30,
    )
    (pf,) = [x for x in f if x.kind == "loader.prefetch_factor"]
    assert pf.fix == "DataLoader(..., num_workers=4, prefetch_factor=1)"
    assert pf.severity == "warning"


def test_fix_settings_and_code_from_findings():
    from torchdoctor.analysis.worker_sweep import fix_code, fix_settings

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
    from torchdoctor.analysis.worker_sweep import predicted_step_ms

    # No workers: 50 ms of model + 100 ms to make the batch, one after the other.
    assert predicted_step_ms(50.0, 10.0, num_workers=0) == pytest.approx(150.0)
    # Workers make batches in parallel: the slower side bounds the step.
    assert predicted_step_ms(50.0, 10.0, num_workers=2) == pytest.approx(100.0)
    assert predicted_step_ms(50.0, 40.0, num_workers=4) == pytest.approx(50.0)
    # Gradient accumulation draws 4 batches per step.
    assert predicted_step_ms(50.0, 40.0, num_workers=4, batches_per_step=4) == pytest.approx(100.0)


def test_analysis_modules_do_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import torchdoctor.analysis.worker_sweep, torchdoctor.analysis.transforms\n"
        "import torchdoctor.analysis.loader_memory, torchdoctor.report.loader\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_no_persistent_workers_advice_when_the_worker_count_stays_zero():
    from torchdoctor.analysis.worker_sweep import SweepPoint, WorkerSweep, sweep_advice
    from torchdoctor.record import LoaderSettings

    sweep = WorkerSweep(
        points=[SweepPoint(0, 10.0), SweepPoint(1, 10.5), SweepPoint(2, 10.4)],
        best_workers=1,
        stopped="plateau",
        candidates=[0, 1, 2, 4],
        measures="step",
    )
    settings = LoaderSettings("D", 480, 32, 0, False, False, None, False, "BatchSampler", "c")
    kinds = [f.kind for f in sweep_advice(sweep, settings, accelerator=False, batches_per_epoch=15)]
    assert "loader.num_workers" not in kinds  # 1.05x is inside the noise
    assert "loader.persistent_workers" not in kinds  # and without workers there is none to keep
