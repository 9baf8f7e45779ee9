"""A whole run's summary made into the record's kinds: each cost timed in events (evaluation,
checkpoint, epoch boundary) by its one rule, from a :class:`WholeSummary` built by hand (no
capture, no clock)."""

from __future__ import annotations

import dataclasses

import pytest

from torchdoctor.analysis.whole_run import FIX_SHARE, TIMED_RULES, whole_run_of
from torchdoctor.record import (
    LoaderSettings,
    SampledPlace,
    TimedCost,
    WholeKind,
    WholeSummary,
)

WALL_S = 100.0


def kinds_of(summary: WholeSummary, loader: LoaderSettings | None = None) -> dict[str, WholeKind]:
    run, _ = whole_run_of(summary, loader)
    return {k.kind: k for k in run.categories}


def loader(workers: int, persistent: bool) -> LoaderSettings:
    return LoaderSettings(
        dataset="Toy",
        dataset_len=100,
        batch_size=8,
        num_workers=workers,
        pin_memory=False,
        persistent_workers=persistent,
        prefetch_factor=None,
        drop_last=False,
        sampler="RandomSampler",
        collate_fn="default_collate",
        created_at="train.py:7",
    )


def test_every_cost_timed_in_events_has_one_rule_and_a_kind_of_its_own():
    names = [rule.kind for rule in TIMED_RULES]
    assert names == ["epoch-boundary", "evaluation", "checkpoint"]
    summary = WholeSummary(wall_s=WALL_S)
    for rule in TIMED_RULES:  # each rule reads its own account, no other
        account = TimedCost(7.0, 2)
        field = {"epoch-boundary": "boundary"}.get(rule.kind, rule.kind)
        kind = rule.kind_of(dataclasses.replace(summary, **{field: account}), None, WALL_S)
        assert (kind.kind, kind.seconds, kind.count) == (rule.kind, 7.0, 2)
        assert kind.detail.startswith(f"2 {rule.many}, 3.50 s each")


@pytest.mark.parametrize(
    ("workers", "persistent", "seconds", "fixed"),
    [
        (2, False, 10.0, True),
        (2, True, 10.0, False),  # the workers already stay: nothing to change
        (0, False, 10.0, False),  # no workers to keep
        (2, False, FIX_SHARE * WALL_S / 2, False),  # too small a share of the run
    ],
)
def test_an_epoch_boundary_is_told_to_keep_its_workers_only_when_they_restart(
    workers, persistent, seconds, fixed
):
    summary = WholeSummary(wall_s=WALL_S, boundary=TimedCost(seconds, 3))
    boundary = kinds_of(summary, loader(workers, persistent))["epoch-boundary"]
    assert boundary.where == "train.py:7"
    assert ("persistent_workers=True" in (boundary.fix or "")) is fixed
    assert boundary.saves_s == (seconds if fixed else None)


def test_a_checkpoint_tells_its_save_functions_own_work_and_its_fix_saves_it_all():
    summary = WholeSummary(
        wall_s=WALL_S, checkpoint=TimedCost(6.0, 3, "/elsewhere/train.py:40", sampled_s=1.5)
    )
    checkpoint = kinds_of(summary)["checkpoint"]
    assert checkpoint.detail == (
        "3 saves, 2.00 s each (1.50 s of it in the save functions around torch.save)"
    )
    assert checkpoint.where == "/elsewhere/train.py:40"
    assert "async_save" in checkpoint.fix and checkpoint.saves_s == 6.0


def test_an_evaluation_with_autograd_on_is_fixed_however_short_and_a_long_one_is_too():
    short = TimedCost(0.1, 1)
    assert kinds_of(WholeSummary(wall_s=WALL_S, evaluation=short))["evaluation"].fix is None
    with_grad = WholeSummary(wall_s=WALL_S, evaluation=short, eval_with_grad=True)
    assert "inference_mode" in kinds_of(with_grad)["evaluation"].fix
    long = WholeSummary(wall_s=WALL_S, evaluation=TimedCost(10.0, 4))
    assert "evaluate less often" in kinds_of(long)["evaluation"].fix


def test_the_slow_steps_excess_in_a_function_of_the_script_is_time_between_steps():
    flush = SampledPlace(("train.py", 30, "flush", 28), 5.0, gaps=4)
    step_part = SampledPlace(("part", "forward"), 1.0)
    summary = WholeSummary(wall_s=WALL_S, steps=100, steps_s=50.0, excess=(flush, step_part))
    kinds = kinds_of(summary)
    assert (kinds["between-steps"].seconds, kinds["between-steps"].count) == (5.0, 4)
    assert kinds["between-steps"].where == "train.py:30 (flush)"
    assert kinds["slow-steps"].seconds == 1.0
    assert "forward 1.00 s" in kinds["slow-steps"].detail


def test_a_stall_inside_the_models_forward_is_named_at_its_line():
    # a 0.25 s stall every 50 forwards inside the user's forward: "slow steps: forward" with
    # advice about recompiles and GC, and no line; the samples inside the part name the line
    stall = SampledPlace(("part", "forward", ("model.py", 42, "forward", 30)), 5.0, gaps=20)
    rest = SampledPlace(("part", "backward"), 0.4, gaps=20)
    summary = WholeSummary(
        wall_s=WALL_S, steps=1000, steps_s=50.0, slow_steps=20, excess=(stall, rest)
    )
    slow = kinds_of(summary)["slow-steps"]
    assert "forward at model.py:42 (forward) 5.00 s, backward 0.40 s" in slow.detail
    assert slow.fix is not None and "forward at model.py:42 (forward)" in slow.fix
    assert "recompiles" not in slow.fix
    # no line holds most of it: the general advice
    spread = SampledPlace(("part", "forward"), 5.0, gaps=20)
    plain = kinds_of(dataclasses.replace(summary, excess=(spread, rest)))["slow-steps"]
    assert plain.fix is not None and "recompiles" in plain.fix


def test_the_first_steps_wait_for_its_first_batch_is_not_called_its_forward():
    # a 1 s worker_init_fn: the first batch's wait was "the first step's forward, backward and
    # optimizer"
    waited = SampledPlace(("part", "data_wait", ("train.py", 50, "main", 40)), 1.0)
    forward = SampledPlace(("part", "forward"), 0.06)
    summary = WholeSummary(
        wall_s=WALL_S, startup_s=3.0, steps=10, steps_s=5.0, startup_places=(waited, forward)
    )
    detail = kinds_of(summary)["startup"].detail
    assert "the first step's wait for its first batch (a DataLoader's workers starting) 1.00 s" in (
        detail
    )
    assert "the first step's forward 0.06 s" in detail
    assert "forward, backward and optimizer" not in detail


@pytest.mark.parametrize("persistent", [False, True])
def test_a_loader_built_anew_every_epoch_is_told_to_be_built_once(persistent):
    # persistent workers die with their loader: the fix is to build it once
    summary = WholeSummary(wall_s=WALL_S, boundary=TimedCost(10.0, 9), epochs=10, loaders_built=10)
    fix = kinds_of(summary, loader(2, persistent))["epoch-boundary"].fix
    assert fix is not None and "is built anew every epoch (10 times" in fix
    assert "at train.py:7" in fix
    once = dataclasses.replace(summary, loaders_built=1)
    told = kinds_of(once, loader(2, persistent))["epoch-boundary"].fix
    assert (told is None) == persistent  # built once: persistent_workers, unless it persists


def test_the_steps_mean_and_the_steady_median_are_each_named():
    # The steady step is the median of the blocks' medians, the steps' figure their mean: side
    # by side ("steady step 2.4 ms" beside "14.9 ms each") each says which it is.
    from torchdoctor.report.whole_run import goodput_words

    summary = WholeSummary(wall_s=WALL_S, steps=11, steps_s=0.149)
    run, _ = whole_run_of(summary, None)
    steps = next(k for k in run.categories if k.kind == "steps")
    assert steps.detail == "10 steps after the first, 14.9 ms each on average"
    run.steady_step_ms = 2.4
    assert goodput_words(run)[0].endswith(
        "10 after the first (steady step 2.4 ms, the median of its blocks)"
    )
