"""The whole run's accountant on a fake clock: each kind gets what the events say, and the kinds
sum to the wall time exactly (no sleeps, no threads: samples are taken by hand)."""

from __future__ import annotations

import ast
import inspect
import sys
import threading

import pytest

from torchdoctor.analysis.whole_course import DRIFT_BLOCKS, DRIFT_RISE, DRIFT_SPAN_S
from torchdoctor.analysis.whole_run import whole_run_of
from torchdoctor.capture import CaptureSession, _hooks, _session, _step_hooks
from torchdoctor.capture._whole import WholeRunWatch
from torchdoctor.capture._whole_stand_in import NoWholeRun
from torchdoctor.capture._whole_steps import BLOCK, MAX_BLOCKS
from torchdoctor.options import RunOptions
from torchdoctor.record import LoaderSettings

MS = 1_000_000
TRAIN, VAL = 1, 2


def no_site():
    return None


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: float) -> int:
        self.now += int(ms * MS)
        return self.now


@pytest.fixture
def run():
    clock = Clock()
    part: list[str | None] = [None]
    watch = WholeRunWatch(clock, threading.get_ident(), lambda: part[0], 0.01, start_ns=0)
    watch.part = part
    watch.clock = clock
    return watch


def train_step(watch: WholeRunWatch, ms: float = 10.0) -> None:
    clock = watch.clock
    watch.batch_requested(TRAIN, clock.now)
    watch.batch_returned(TRAIN, clock.advance(1))
    watch.training(clock.now)
    watch.step_ended(clock.advance(ms - 1))


def accounts(watch: WholeRunWatch, cut: bool = False, loader: LoaderSettings | None = None):
    run, findings = whole_run_of(watch.summary(), loader=loader, cut=cut)
    return run, {k.kind: k for k in run.categories}, findings


def sums_to_wall(run) -> None:
    assert sum(k.seconds for k in run.categories) == pytest.approx(run.wall_s, rel=1e-3)


def test_startup_steps_and_tail_sum_to_the_wall(run):
    run.clock.advance(1000)
    for _ in range(65):
        train_step(run)
    run.clock.advance(50)
    whole, kinds, _ = accounts(run)
    sums_to_wall(whole)
    assert kinds["startup"].seconds == pytest.approx(1.010, abs=1e-6)  # until the first step ended
    assert kinds["steps"].count == 64  # after the first, which ends the startup
    assert kinds["steps"].seconds == pytest.approx(64 * 0.010, abs=1e-6)
    assert kinds["tail"].seconds == pytest.approx(0.050, abs=1e-6)
    assert whole.goodput == pytest.approx(0.64 / whole.wall_s, abs=1e-3)


def flush_metrics(watch: WholeRunWatch) -> None:
    """A function of the 'user' (this test file) in which a sample is taken."""
    watch.sampler.sample()


def steps_with_a_flush(watch: WholeRunWatch):
    """A block of steps, the tenth with 100 ms of metric flushing in it, sampled there; the
    accounts, and the between-steps kinds (one, at ``flush_metrics``)."""
    for i in range(BLOCK + 1):
        if i == 10:
            watch.sampler._last_ns = watch.clock.now
            watch.clock.advance(100)
            flush_metrics(watch)
        train_step(watch)
    whole, kinds, _ = accounts(watch)
    sums_to_wall(whole)
    between = [k for k in whole.categories if k.kind == "between-steps"]
    assert len(between) == 1 and "flush_metrics" in between[0].where
    return whole, kinds, between


def test_the_excess_of_a_slow_step_goes_to_the_sampled_function(run):
    whole, kinds, between = steps_with_a_flush(run)
    assert between[0].seconds == pytest.approx(0.100, abs=1e-6)
    assert kinds["steps"].seconds == pytest.approx(BLOCK * 0.010, abs=1e-6)
    assert "slow-steps" not in kinds  # all of the excess was in the script's function


def test_an_unsampled_slow_step_is_a_slow_step(run):
    for i in range(BLOCK + 1):
        train_step(run, ms=60 if i == 5 else 10)
    whole, kinds, _ = accounts(run)
    assert kinds["slow-steps"].count == 1
    assert kinds["slow-steps"].seconds == pytest.approx(0.050, abs=1e-6)
    assert "between-steps" not in kinds
    sums_to_wall(whole)


def test_an_evaluation_pass_from_eval_mode_to_its_last_batch(run):
    clock = run.clock
    train_step(run)
    train_step(run)
    run.mode_set(False, clock.advance(1))  # model.eval()
    start = clock.now
    for _ in range(3):
        run.batch_requested(VAL, clock.advance(2))
        run.batch_returned(VAL, clock.advance(5))
        run.forward(clock.now, clock.advance(20), grad=False, training=False, find=no_site)
    end = clock.now
    run.mode_set(True, clock.advance(3))  # model.train(): after the pass
    train_step(run)
    whole, kinds, _ = accounts(run)
    assert kinds["evaluation"].count == 1
    assert kinds["evaluation"].seconds == pytest.approx((end - start) / 1e9, abs=1e-6)
    assert "autograd on" not in (kinds["evaluation"].fix or "")
    sums_to_wall(whole)


def test_an_evaluation_with_autograd_on_is_told_to_use_inference_mode(run):
    train_step(run)
    run.forward(run.clock.now, run.clock.advance(30), grad=True, training=False, find=no_site)
    train_step(run)
    _, kinds, _ = accounts(run)
    assert "autograd on" in kinds["evaluation"].fix and "inference_mode" in kinds["evaluation"].fix


def test_saves_in_one_gap_are_one_checkpoint(run):
    clock = run.clock
    train_step(run)
    for ms in (200, 50):  # the model, then the optimizer
        run.save_started()
        started = clock.now
        run.save_ended(started, clock.advance(ms), "train.py:40", [])
    train_step(run)
    whole, kinds, _ = accounts(run)
    assert kinds["checkpoint"].count == 1
    assert kinds["checkpoint"].seconds == pytest.approx(0.250, abs=1e-6)
    assert kinds["checkpoint"].where == "train.py:40"
    sums_to_wall(whole)


def prepare_checkpoint(watch: WholeRunWatch, ms: float) -> None:
    """The script's save function (Lightning's ``_save_checkpoint``): ``ms`` of its own work,
    not sampled, then ``torch.save``, during which the sampler's thread takes its late look."""
    watch.clock.advance(ms)
    watch.save_started()
    started = watch.clock.now
    watch.sampler.sample()  # late: the save is under way, timed exactly; this look drops its time
    watch.save_ended(started, watch.clock.advance(5), "train.py:60", [sys._getframe().f_code])


def test_a_save_functions_work_before_a_late_look_is_the_checkpoints(run):
    # CI, once: a Lightning run's 3 saves of 0.3 s each read 0.62 s: the sampler's thread came
    # late, found torch.save under way, and dropped the 0.3 s of work before it
    for _ in range(2):
        train_step(run)
    run.sampler._last_ns = run.clock.now  # its last look, as the step ended
    prepare_checkpoint(run, 300)
    train_step(run)
    whole, kinds, _ = accounts(run)
    assert kinds["checkpoint"].count == 1
    assert kinds["checkpoint"].seconds == pytest.approx(0.305, abs=1e-6)
    assert "between-steps" not in kinds and "slow-steps" not in kinds
    sums_to_wall(whole)


def save_now(watch: WholeRunWatch, ms: float) -> None:
    """The script's save function, ``torch.save`` at once."""
    watch.save_started()
    started = watch.clock.now
    watch.save_ended(started, watch.clock.advance(ms), "train.py:70", [sys._getframe().f_code])


def test_a_save_right_after_a_step_counts_its_own_time_only(run):
    # the look as a save begins counts from the step's end, not from the sampler's last look
    # (here at each step's start: 10 ms of the step would have gone to the checkpoint)
    for i in range(40):
        run.sampler._last_ns = run.clock.now
        train_step(run)
        if i % 4 == 3:
            save_now(run, 5)
    whole, kinds, _ = accounts(run)
    assert kinds["checkpoint"].count == 10
    assert kinds["checkpoint"].seconds == pytest.approx(10 * 0.005, abs=1e-6)
    sums_to_wall(whole)


def test_a_save_made_by_the_loops_function_before_its_first_step_leaves_it_a_loop(run):
    # a checkpoint of the initial weights, saved from the loop's own function: that function
    # is on every later sample's stack, and everything sampled was taken for the checkpoint's
    run.save_started()
    started = run.clock.now
    run.save_ended(started, run.clock.advance(50), "train.py:5", [sys._getframe().f_code])
    _, kinds, _ = steps_with_a_flush(run)
    assert kinds["checkpoint"].seconds == pytest.approx(0.050, abs=1e-6)


def test_an_initial_save_before_the_first_step_takes_none_of_the_startup(run):
    # main(): build the model (500 ms), save the initial weights, build the loader (600 ms),
    # then the loop: main's work around the save was counted as the checkpoint's (3.2 s of a
    # run whose saves took 1.0 s), for main had called torch.save
    run.clock.advance(500)
    flush_metrics(run)  # a sample in main, building the model
    run.save_started()
    started = run.clock.now
    run.save_ended(started, run.clock.advance(5), "train.py:20", [sys._getframe().f_code])
    run.clock.advance(600)
    flush_metrics(run)  # building the loader
    for _ in range(3):
        train_step(run)
    whole, kinds, _ = accounts(run)
    assert kinds["checkpoint"].seconds == pytest.approx(0.005, abs=1e-6)
    assert kinds["startup"].seconds == pytest.approx(1.110, abs=1e-6)  # with the first step
    sums_to_wall(whole)


def validate(watch: WholeRunWatch) -> None:
    """The script's validation: 3 batches of 30 ms, 100 ms of metrics after the last, then the
    best model saved (5 ms), before ``model.train()``: a function that ran the pass and saves."""
    clock = watch.clock
    watch.mode_set(False, clock.now)
    for _ in range(3):
        watch.batch_requested(VAL, clock.now)
        watch.batch_returned(VAL, clock.advance(1))
        watch.forward(clock.now, clock.advance(29), grad=False, training=False, find=no_site)
        watch.sampler.sample()  # inside the pass, in this function
    clock.advance(100)
    watch.sampler.sample()  # the metrics, after the pass's last call
    watch.save_started()
    started = clock.now
    watch.save_ended(started, clock.advance(5), "train.py:90", [sys._getframe().f_code])
    watch.mode_set(True, clock.now)


def test_a_validation_that_saves_the_best_model_keeps_its_metrics_in_the_pass(run):
    # the function that ran the pass called torch.save: from the second epoch on its metrics
    # were sampled as a save function's work (checkpoint 0.316 s for 9 ms of saves)
    for _ in range(3):
        for _ in range(3):
            train_step(run)
        run.sampler._last_ns = run.clock.now
        validate(run)
    train_step(run)
    whole, kinds, _ = accounts(run)
    assert kinds["checkpoint"].seconds == pytest.approx(3 * 0.005, abs=1e-6)
    assert kinds["evaluation"].count == 3
    assert kinds["evaluation"].seconds == pytest.approx(3 * 0.190, abs=1e-6)
    sums_to_wall(whole)


def test_the_checkpoints_line_is_where_its_saves_cost_the_most(run):
    save_now(run, 5)  # an initial save: cheap
    train_step(run)
    for _ in range(3):
        prepare_checkpoint(run, 200)  # the costly one
        train_step(run)
    _, kinds, _ = accounts(run)
    assert kinds["checkpoint"].where == "train.py:60"


def test_an_epoch_boundary_less_the_evaluation_in_it(run):
    clock = run.clock
    train_step(run)
    train_step(run)
    run.loader_exhausted(TRAIN, clock.advance(1))  # the epoch's last batch was drawn
    clock.advance(100)  # end-of-epoch work
    run.forward(
        clock.now, clock.advance(40), grad=False, training=True, find=no_site
    )  # a no_grad evaluation
    run.iterator_made(TRAIN, clock.advance(5))
    run.batch_requested(TRAIN, clock.now)
    run.batch_returned(TRAIN, clock.advance(300))  # workers started again
    run.step_ended(clock.advance(9))
    whole, kinds, _ = accounts(run)
    assert kinds["epoch-boundary"].count == 1
    # 100 + 40 + 5 + 300 ms from the last batch to the next epoch's first, less the evaluation
    assert kinds["epoch-boundary"].seconds == pytest.approx(0.405, abs=1e-6)
    assert kinds["evaluation"].seconds == pytest.approx(0.040, abs=1e-6)
    assert whole.epochs == 1
    sums_to_wall(whole)


def test_a_few_batches_of_the_training_data_read_under_no_grad_are_an_evaluation(run):
    # LLMs-from-scratch's evaluate_model: every few steps, under torch.no_grad(), a new iterator
    # of the *training* loader, a few batches, break (or read to its end). Each re-iteration was
    # taken for a new epoch: 59 epoch boundaries in a run of 2 epochs.
    import torch

    clock = run.clock
    for _ in range(3):
        train_step(run)
        train_step(run)
        run.mode_set(False, clock.advance(1))
        with torch.no_grad():
            run.iterator_made(TRAIN, clock.advance(2))
            for _batch in range(3):
                run.batch_requested(TRAIN, clock.now)
                run.batch_returned(TRAIN, clock.advance(1))
                run.forward(clock.now, clock.advance(4), grad=False, training=False, find=no_site)
            run.loader_exhausted(TRAIN, clock.advance(1))  # read to its end, once
        run.mode_set(True, clock.now)
    train_step(run)
    whole, kinds, _ = accounts(run)
    assert whole.epochs == 0 and "epoch-boundary" not in kinds, kinds
    assert kinds["evaluation"].count == 3
    # from model.eval() to the loader run out: 2 + 3 x (1 + 4) + 1 ms each time
    assert kinds["evaluation"].seconds == pytest.approx(3 * 0.018, abs=1e-6)
    sums_to_wall(whole)


def test_a_training_loader_rebuilt_each_epoch_is_still_the_training_loader(run):
    # Each epoch builds its Dataset and DataLoader anew (a new key): its batches were taken for an
    # evaluation's, one pass a step (301 passes), with the advice to run them under
    # inference_mode, and the boundary never closed.
    clock = run.clock
    for _ in range(3):
        train_step(run)
    run.loader_exhausted(TRAIN, clock.advance(1))
    rebuilt = 3
    run.iterator_made(rebuilt, clock.advance(5))
    for first in (True, False, False):
        run.batch_requested(rebuilt, clock.now)
        run.batch_returned(rebuilt, clock.advance(300 if first else 1))  # workers start first
        run.forward(clock.now, clock.advance(4), grad=True, training=True, find=no_site)
        run.backward_started(clock.advance(1))
        run.step_ended(clock.advance(4))
    whole, kinds, _ = accounts(run)
    assert "evaluation" not in kinds, kinds
    assert kinds["epoch-boundary"].count == 1
    # from the last batch of the first loader to the first of the rebuilt one: 1 + 5 + 300 ms
    assert kinds["epoch-boundary"].seconds == pytest.approx(0.305, abs=1e-6)
    assert whole.epochs == 1 and whole.steps == 6
    sums_to_wall(whole)


def loader_of(workers: int, persistent: bool) -> LoaderSettings:
    return LoaderSettings(
        dataset="D",
        dataset_len=1000,
        batch_size=8,
        num_workers=workers,
        pin_memory=False,
        persistent_workers=persistent,
        prefetch_factor=2 if workers else None,
        drop_last=False,
        sampler="RandomSampler",
        collate_fn="default_collate",
        created_at="train.py:12",
    )


@pytest.mark.parametrize(
    ("workers", "persistent", "told"),
    [(2, False, True), (2, True, False), (0, False, False)],
    ids=["workers-restarted", "workers-persistent", "no-workers"],
)
def test_an_epoch_boundary_is_told_persistent_workers_only_when_workers_restart(
    run, workers, persistent, told
):
    clock = run.clock
    for _epoch in range(2):
        for _ in range(10):
            train_step(run)
        run.loader_exhausted(TRAIN, clock.advance(1))
        run.iterator_made(TRAIN, clock.advance(5))
        run.batch_requested(TRAIN, clock.now)
        run.batch_returned(TRAIN, clock.advance(300))  # the first batch of the next epoch
        run.step_ended(clock.advance(9))
    _, kinds, _ = accounts(run, loader=loader_of(workers, persistent))
    boundary = kinds["epoch-boundary"]
    assert boundary.count == 2 and boundary.where == "train.py:12"
    assert boundary.seconds > 0.5 * sum(k.seconds for k in kinds.values())  # worth a fix
    # Persistent workers are not started again at an epoch: the fix would change nothing.
    assert ("persistent_workers=True" in (boundary.fix or "")) is told
    assert (boundary.saves_s == boundary.seconds) is told


def test_a_run_of_many_steps_keeps_a_bounded_series(run):
    for _ in range(BLOCK * (MAX_BLOCKS + 10)):
        train_step(run)
    whole, kinds, _ = accounts(run)
    assert len(whole.series) <= MAX_BLOCKS
    assert sum(b.steps for b in whole.series) == BLOCK * (MAX_BLOCKS + 10) - 1
    sums_to_wall(whole)


def test_a_step_that_slows_over_the_run_is_a_drift_finding(run):
    for i in range(BLOCK * 12):
        train_step(run, ms=200 + 20 * (i // BLOCK))  # 200 ms rising to 420 ms, over 77 s
    _, _, findings = accounts(run)
    assert [f.kind for f in findings] == ["whole.drift"]


def test_a_steady_run_has_no_drift(run):
    for _ in range(BLOCK * 12):
        train_step(run, ms=200)
    assert accounts(run)[2] == []


def test_a_short_run_has_no_drift_however_its_steps_go(run):
    for i in range(BLOCK * 12):
        train_step(run, ms=10 + i // BLOCK)  # 10 ms rising to 21 ms, over 6 s: noise here
    whole, _, findings = accounts(run)
    body = whole.series[1:]
    # The step rose by 90% (11 to 21 ms), far past a drift's rise, in enough blocks: only the run's
    # span, under DRIFT_SPAN_S, keeps this from being one.
    assert body[-1].step_ms / body[0].step_ms - 1 > DRIFT_RISE and len(body) >= DRIFT_BLOCKS
    assert body[-1].end_s - body[0].end_s < DRIFT_SPAN_S
    assert findings == []


def test_a_cut_run_is_projected_without_its_startup(run):
    run.clock.advance(5000)
    for _ in range(100):
        train_step(run)
    whole, _, _ = accounts(run, cut=True)
    assert whole.ending == "cut"
    assert whole.goodput < 0.2
    assert whole.projected_goodput == pytest.approx(1.0, abs=0.02)
    assert "before an epoch ended" in whole.projection
    assert accounts(run)[2] == []


def test_a_call_in_eval_mode_followed_by_backward_is_a_training_step(run):
    clock = run.clock
    train_step(run)
    for _ in range(3):  # model.eval() was left on: each step's forward runs in eval mode
        run.forward(clock.now, clock.advance(4), grad=True, training=False, find=no_site)
        run.backward_started(clock.advance(1))
        run.step_ended(clock.advance(5))
    whole, kinds, findings = accounts(run)
    assert "evaluation" not in kinds
    assert [f.kind for f in findings] == ["whole.eval-mode-training"]


def test_a_forward_between_epochs_is_an_evaluation(run):
    clock = run.clock
    train_step(run)
    train_step(run)
    run.loader_exhausted(TRAIN, clock.advance(1))
    run.forward(clock.now, clock.advance(50), grad=True, training=True, find=no_site)
    run.batch_requested(TRAIN, clock.advance(1))
    run.batch_returned(TRAIN, clock.advance(2))
    run.step_ended(clock.advance(8))
    _, kinds, _ = accounts(run)
    assert kinds["evaluation"].count == 1
    assert kinds["evaluation"].seconds == pytest.approx(0.050, abs=1e-6)
    assert "autograd on" in kinds["evaluation"].fix


def stall_in_forward(watch):
    """The 'user's' forward, where a stall now and then is sampled."""
    watch.sampler.sample()


def test_a_slow_steps_stall_inside_a_part_is_named_at_the_users_line(run):
    for i in range(BLOCK + 1):
        if i == 10:  # 250 ms stalled inside the model's forward
            run.sampler._last_ns = run.clock.now
            run.clock.advance(250)
            run.part[0] = "forward"
            stall_in_forward(run)
            run.part[0] = None
        train_step(run)
    whole, kinds, _ = accounts(run)
    slow = kinds["slow-steps"]
    assert "forward at " in slow.detail and "(stall_in_forward) 0.25 s" in slow.detail, slow
    assert "stall_in_forward" in slow.fix and "recompiles" not in slow.fix
    sums_to_wall(whole)


def step_of_the_script(watch):
    """A function of the 'user' run in every step (its loss, say), sampled."""
    watch.sampler.sample()


def test_the_steps_own_code_is_not_between_steps(run):
    for i in range(BLOCK + 1):
        run.sampler._last_ns = run.clock.now
        run.clock.advance(6 if i != 10 else 30)  # one step is slow, in the same code
        step_of_the_script(run)
        train_step(run, ms=4)
    whole, kinds, _ = accounts(run)
    assert "between-steps" not in kinds
    assert "the step's own code" in kinds["slow-steps"].detail
    sums_to_wall(whole)


# --- the stand-in: the hooks read the same with the accounts on or off ----------------------


def _called_on_whole(source: str) -> set[str]:
    """The members the hooks' code uses on the whole-run watch (``whole.X``, ``self.whole.X``,
    ``hooks.whole.X``), ``_patch_whole_run`` left out (installed for a whole run only)."""
    tree = ast.parse(source)
    skipped = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef) and f.name == "_patch_whole_run"
        for n in ast.walk(f)
    }
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in skipped:
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id == "whole") or (
            isinstance(owner, ast.Attribute) and owner.attr == "whole"
        ):
            used.add(node.attr)
    return used


def test_the_stand_in_has_every_member_the_hooks_use_with_the_watchs_signature():
    sources = [_step_hooks, _hooks, _session]
    used = set().union(*(_called_on_whole(inspect.getsource(m)) for m in sources))
    assert {"forward_started", "training", "loading", "step_ended"} <= used  # the scan works
    missing = {name for name in used if not hasattr(NoWholeRun, name)}
    assert not missing
    for name in used:
        if callable(getattr(NoWholeRun, name)):
            stand_in = inspect.signature(getattr(NoWholeRun, name))
            assert stand_in == inspect.signature(getattr(WholeRunWatch, name)), name
    assert not NoWholeRun.active and WholeRunWatch.active


def test_a_plain_session_gives_its_hooks_the_stand_in_and_outside_readers_none():
    plain = CaptureSession(RunOptions())
    assert plain.whole is None and isinstance(plain.hooks.whole, NoWholeRun)
    whole = CaptureSession(RunOptions(whole=True))
    whole.install()
    try:
        assert isinstance(whole.whole, WholeRunWatch) and whole.hooks.whole is whole.whole
    finally:
        whole.uninstall()
