"""The DataLoader settings advised from a measured worker sweep, each with its exact code."""

from __future__ import annotations

import pytest

from torchdoctor.loader import sweep_advice
from torchdoctor.record import LoaderSettings, SweepPoint, WorkerSweep


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


def test_no_persistent_workers_advice_when_the_worker_count_stays_zero():
    sweep = WorkerSweep(
        points=[SweepPoint(0, 10.0), SweepPoint(1, 10.5), SweepPoint(2, 10.4)],
        best_workers=1,
        stopped="plateau",
        candidates=[0, 1, 2, 4],
        measures="step",
    )
    loader = LoaderSettings("D", 480, 32, 0, False, False, None, False, "BatchSampler", "c")
    kinds = [f.kind for f in sweep_advice(sweep, loader, accelerator=False, batches_per_epoch=15)]
    assert "loader.num_workers" not in kinds  # 1.05x is inside the noise
    assert "loader.persistent_workers" not in kinds  # and without workers there is none to keep


def threaded_sweep(points, best, default_threads=2) -> WorkerSweep:
    """A whole-step sweep of ``(num_workers, threads, steps/s)`` with its pick ``best``."""
    return WorkerSweep(
        points=[SweepPoint(w, rate, threads=t) for w, t, rate in points],
        best_workers=best[0],
        best_threads=best[1],
        default_threads=default_threads,
        stopped="plateau",
        candidates=sorted({w for w, _, _ in points}),
        measures="step",
    )


ISSUE_CASE = [(0, 2, 21.7), (0, 1, 22.0), (1, 1, 25.0), (2, 1, 38.0), (4, 1, 36.0), (2, 2, 24.6)]


def test_advice_names_the_workers_and_the_threads_together():
    sweep = threaded_sweep(ISSUE_CASE, best=(2, 1))
    findings = sweep_advice(sweep, settings(), accelerator=False)
    (nw,) = [f for f in findings if f.kind == "loader.num_workers"]
    assert nw.title == (
        "num_workers=0 -> 2 and torch.set_num_threads(1) at the start: "
        "1.75x the training steps per second"
    )
    assert nw.fix == (
        "DataLoader(..., num_workers=2)\ntorch.set_num_threads(1)  # at the start of the script"
    )
    assert nw.detail["recommended"] == 2 and nw.detail["threads"] == 1
    assert nw.detail["default_threads"] == 2 and [2, 1, 38.0] in nw.detail["trials"]
    assert nw.detail["predicted_speedup"] == pytest.approx(38.0 / 21.7)
    assert "loader.num_threads" not in kinds(findings)


def test_threads_alone_are_their_own_finding():
    sweep = threaded_sweep(ISSUE_CASE, best=(2, 1))
    findings = sweep_advice(sweep, settings(num_workers=2), accelerator=False)
    (nt,) = [f for f in findings if f.kind == "loader.num_threads"]
    assert nt.title == (
        "torch.set_num_threads(1) at the start, with num_workers=2: "
        "1.54x the training steps per second"
    )
    assert nt.fix == "torch.set_num_threads(1)  # at the start of the script"
    assert nt.detail["recommended"] == 1
    assert "loader.num_workers" not in kinds(findings)


def test_no_thread_advice_inside_the_noise_or_when_the_pick_keeps_them():
    sweep = threaded_sweep([(0, 2, 21.7), (0, 1, 23.0)], best=(0, 1))
    assert not {"loader.num_workers", "loader.num_threads"} & set(
        kinds(sweep_advice(sweep, settings(), accelerator=False))
    )
    sweep = threaded_sweep([(0, 2, 10.0), (0, 1, 6.0), (2, 2, 38.0)], best=(2, 2))
    (nw,) = sweep_advice(sweep, settings(), accelerator=False)
    assert nw.fix == "DataLoader(..., num_workers=2)" and nw.detail["threads"] is None
