"""The whole-step sweep's search of worker counts with main-process threads, on injected rates."""

from __future__ import annotations

import pytest

from torchdoctor.loader import (
    MODEL_ALONE,
    PATH_PATIENCE,
    SweepPolicy,
    WorkerThreadPolicy,
    pick_setting,
    sweep_candidates,
    thread_candidates,
)
from torchdoctor.record import SweepPoint


def search(rates, *, cpus=2, default_threads=2, current=0, baseline=None, confirm_rates=None):
    """Run the policy on ``rates[(workers, threads)]``; the settings it searched, in order.

    ``rates[(MODEL_ALONE, threads)]`` are the model's own steps/s (the probe); ``baseline`` the
    rate of the steps measured before the sweep; ``confirm_rates`` what the confirm stage's
    side-by-side trials measure (else the same rates).
    """
    confirm_rates = confirm_rates or {}
    policy = WorkerThreadPolicy(
        sweep_candidates(cpus, current),
        cpu_count=cpus,
        default_threads=default_threads,
        current_workers=current,
        baseline_batches_per_s=baseline,
    )
    tried = []
    while (setting := policy.next()) is not None:
        if policy.confirming:  # the fastest two, again, side by side (tested below)
            policy.add(*setting, confirm_rates.get(setting, rates[setting]))
            continue
        assert setting not in tried, f"{setting} measured twice"
        tried.append(setting)
        policy.add(*setting, rates[setting])
    return policy, tried


PROBE = [(MODEL_ALONE, 2), (MODEL_ALONE, 1)]

#: The issue's case on 2 cores (steps/s): a costly transform, a tiny model. Workers help a
#: little with the model's 2 threads, much more with 1; alone, the model is as fast on 1 thread.
TINY_MODEL = {
    (MODEL_ALONE, 2): 250.0, (MODEL_ALONE, 1): 260.0,
    (0, 2): 21.7, (0, 1): 22.0,
    (1, 2): 20.0, (1, 1): 25.0,
    (2, 2): 24.6, (2, 1): 38.0,
    (4, 2): 22.0, (4, 1): 36.0,
}  # fmt: skip

#: Workers that wait (I/O) and a model that needs its threads: fewer threads only lose.
THREADED_MODEL = {
    (MODEL_ALONE, 2): 100.0, (MODEL_ALONE, 1): 60.0,
    (0, 2): 10.0, (0, 1): 6.0,
    (1, 2): 20.0, (1, 1): 12.0,
    (2, 2): 38.0, (2, 1): 13.0,
    (4, 2): 60.0, (4, 1): 13.5,
}  # fmt: skip


def test_thread_candidates_are_the_free_cores_the_scripts_own_and_one():
    assert thread_candidates(8, 8, 2) == [6, 8, 1]
    assert thread_candidates(8, 8, 16) == [1, 8]
    assert thread_candidates(2, 2, 0) == [2, 1]
    assert thread_candidates(8, 4, 2) == [4, 1]  # never more than the script's own
    assert thread_candidates(4, 1, 0) == [1]


def test_idle_threads_search_workers_on_one_thread_without_the_grid():
    policy, tried = search(TINY_MODEL, baseline=21.7)
    # The probe (the model alone on 2 threads, then 1), then the workers on 1 thread; 0 workers
    # with 2 threads is the script as it was measured: 3 whole-step trials of the 8 pairs.
    assert tried == [*PROBE, (1, 1), (2, 1), (4, 1)]
    assert policy.threads_idle is True
    assert policy.best() == (2, 1)  # 36 at 4 workers is within 5% of 38: fewer workers
    sweep = policy.result(seconds=1.5)
    assert (sweep.best_workers, sweep.best_threads, sweep.default_threads) == (2, 1, 2)
    assert sweep.threads_change == 1 and sweep.measures == "step"
    assert sweep.speedup_over(0) == pytest.approx(38.0 / 21.7)  # over 0 workers, 2 threads
    assert [(p.num_workers, p.threads) for p in sweep.points] == [(0, 2), (1, 1), (2, 1), (4, 1)]
    assert [(p.threads, p.batches_per_s) for p in sweep.threads_probe] == [(2, 250.0), (1, 260.0)]


def test_a_model_a_little_faster_alone_on_one_thread_keeps_the_baseline_for_0_workers():
    rates = dict(TINY_MODEL)
    rates[(MODEL_ALONE, 1)] = 400.0  # 2.5 ms a step instead of 4 ms: 3% of a 46 ms step
    _, tried = search(rates, baseline=21.7)
    assert tried == [*PROBE, (1, 1), (2, 1), (4, 1)]


def test_without_a_measured_baseline_the_script_as_it_is_is_measured_too():
    policy, tried = search(TINY_MODEL)
    assert tried == [*PROBE, (0, 1), (1, 1), (2, 1), (4, 1), (0, 2)]
    assert policy.result().speedup_over(0) == pytest.approx(38.0 / 21.7)


def test_threads_the_model_uses_are_checked_and_the_search_goes_on_with_them():
    policy, tried = search(THREADED_MODEL, baseline=10.0)
    assert policy.threads_idle is False
    # Path on the cores the workers leave (1 on 2 cores), no gain past 1 worker; the check at
    # the path's pick (2) finds 2 threads far better, so more workers are tried with 2 threads.
    assert tried == [*PROBE, (1, 1), (2, 1), (4, 1), (2, 2), (4, 2)]
    assert policy.best() == (4, 2)
    assert policy.result().threads_change is None


def test_the_scripts_own_workers_with_its_own_threads_are_the_baseline():
    policy, tried = search(TINY_MODEL, current=2, baseline=24.6)
    assert (2, 2) not in tried and (0, 1) in tried  # 0 workers is measured, the baseline not
    sweep = policy.result()
    assert sweep.point(2).threads == 2 and sweep.speedup_over(2) == pytest.approx(38.0 / 24.6)
    _, tried = search(TINY_MODEL, current=2)
    assert tried[-1] == (2, 2)  # measured after the path when not given


def test_one_thread_already_is_the_workers_only_sweep():
    rates = {(w, 1): r for (w, t), r in THREADED_MODEL.items() if t == 1}
    policy, tried = search(rates, default_threads=1)  # no probe either
    workers_only = SweepPolicy(sweep_candidates(2, 0), patience=PATH_PATIENCE)
    while (n := workers_only.next()) is not None:
        workers_only.add(n, rates[(n, 1)])
    assert [w for w, _ in tried] == [p.num_workers for p in workers_only.points]
    assert policy.best() == (workers_only.best(), 1)
    assert policy.result().threads_change is None


def test_many_cores_stay_far_from_the_grid():
    # 8 cores, a model that needs no threads: rates grow with workers, whatever the threads.
    rates = {(w, t): 10.0 * (1 + min(w, 6)) for w in sweep_candidates(8, 0) for t in range(1, 9)}
    rates.update({(MODEL_ALONE, 8): 100.0, (MODEL_ALONE, 1): 99.0})
    _, tried = search(rates, cpus=8, default_threads=8, baseline=10.0)
    assert len(tried) <= len(sweep_candidates(8, 0)) + 2 < len(rates) / 4


def test_the_pick_prefers_fewer_workers_then_the_scripts_own_threads():
    points = [SweepPoint(2, 37.0, threads=2), SweepPoint(2, 38.0, threads=1)]
    assert pick_setting(points, default_threads=2) == (2, 2)  # within 5%: nothing to change
    points.append(SweepPoint(1, 30.0, threads=1))
    assert pick_setting(points, default_threads=2) == (2, 2)
    points.append(SweepPoint(4, 60.0, threads=1))
    assert pick_setting(points, default_threads=2) == (4, 1)


def test_bad_rates_and_empty_searches_are_refused():
    policy = WorkerThreadPolicy([0, 1], cpu_count=2, default_threads=2, current_workers=0)
    with pytest.raises(ValueError, match="nothing measured"):
        policy.best()
    with pytest.raises(ValueError, match="finite"):
        policy.add(0, 2, float("nan"))


def test_threads_that_slow_the_model_alone_are_tried_without_workers_too():
    # On a loaded machine the model's 2 threads made it 50x slower alone, and the loop without
    # workers 3x slower: 0 workers on 1 thread is a pick of its own.
    rates = dict(TINY_MODEL)
    rates.update({(MODEL_ALONE, 2): 20.0, (MODEL_ALONE, 1): 1000.0, (0, 1): 29.0})
    rates.update({(1, 1): 26.0, (2, 1): 25.0, (4, 1): 25.5})
    policy, tried = search(rates, baseline=7.5)
    assert tried == [*PROBE, (0, 1), (1, 1), (2, 1), (4, 1)]
    assert policy.best() == (0, 1)


def test_the_two_fastest_are_measured_again_side_by_side_and_decide_the_pick():
    confirmed = []

    class Watching(dict):
        def get(self, key, default=None):
            confirmed.append(key)
            return super().get(key, default)

    # (4, 1) measured 45 steps/s once, in a quiet moment: clearly ahead of (2, 1)'s 38. Side by
    # side, it runs at 30: the pick is (2, 1), from the confirm trials alone.
    lucky = {**TINY_MODEL, (4, 1): 45.0}
    policy, tried = search(lucky, baseline=21.7, confirm_rates=Watching({(4, 1): 30.0}))
    assert confirmed == [(4, 1), (2, 1), (2, 1), (4, 1)], "ABBA over the fastest two"
    assert policy.best() == (2, 1)
    sweep = policy.result()
    (four,) = [p for p in sweep.points if (p.num_workers, p.threads) == (4, 1)]
    assert four.repeats == [30.0, 30.0] and four.batches_per_s == 30.0
    assert four.first_batches_per_s == 45.0
    # Without the confirm stage the one lucky trial would have chosen 4 workers.
    first = [SweepPoint(2, 38.0, threads=1), SweepPoint(4, 45.0, threads=1)]
    assert pick_setting(first, 2) == (4, 1)
