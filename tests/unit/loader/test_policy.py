"""The worker sweep's candidates, stop rule and pick, driven by fake throughputs."""

from __future__ import annotations

import pytest

from torchdoctor.loader import (
    MAX_SWEEP_WORKERS,
    PLATEAU_GAIN,
    TARGET_HEADROOM,
    SweepPolicy,
    max_sweep_workers,
    sweep_candidates,
)


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
