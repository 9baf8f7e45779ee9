"""The compare rule on per-step times made to order (``analysis.compare``)."""

from __future__ import annotations

import pytest

from torchdoctor.analysis.compare import (
    IMPROVED,
    NO_CHANGE,
    REGRESSED,
    RUN_TO_RUN,
    block_spread,
    compare,
    judge,
    pair_speedups,
)
from torchdoctor.analysis.verdict import summarise
from torchdoctor.record import RunRecord


def record(steps: list[float]) -> RunRecord:
    r = RunRecord()
    for ms in steps:
        r.steps.add_step({"data_wait": ms * 0.8, "forward": ms * 0.2}, 1)
    summarise(r)
    return r


STEADY = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.1, 10.2, 9.9, 10.0, 10.1, 9.9]


def test_a_steady_2x_is_improved_and_the_reverse_regressed():
    half = [x / 2 for x in STEADY]
    assert compare(record(STEADY), record(half)).kind == IMPROVED
    assert compare(record(half), record(STEADY)).kind == REGRESSED


def test_a_burst_of_load_in_one_run_is_no_change():
    # Measured in CI: the same script twice came out 0.88x; a burst lengthened one run's steps.
    burst = STEADY[:8] + [16.0, 15.0, 14.0, 15.0]
    assert block_spread(burst) > 0.13
    result = compare(record(STEADY), record(burst))
    assert result.judged.speedup < 0.9 and result.judged.high < 1.0  # beyond the step-to-step noise
    assert result.kind == NO_CHANGE and result.notes


def test_one_preempted_step_does_not_widen_the_allowance():
    # CI: blocks of one run came out 2.4x apart by their means, and a measured 1.8x was refused
    stalled = STEADY[:5] + [300.0] + STEADY[6:]
    assert block_spread(stalled) < 0.05
    result = compare(record(stalled * 2), record([x / 2 for x in STEADY] * 2))
    assert result.judged.allowance < 0.1 + 1e-9 and result.judged.low > 1.0
    assert result.kind == IMPROVED


def test_a_steady_12_percent_change_counts():
    slower = [x * 1.12 for x in STEADY]
    assert compare(record(slower), record(STEADY)).kind == IMPROVED


def test_load_that_moves_whole_pairs_of_runs_leaves_a_paired_gain_clear():
    # Beside a hog, one side's runs came out 77% apart (here 90%); within each pair B stays 1.8x
    # faster.
    speeds = [1.0, 1.9, 1.3]  # the machine's slowness during each pair
    a_runs = [[x * s for x in STEADY] for s in speeds]
    b_runs = [[x * s / 1.8 for x in STEADY] for s in speeds]
    a = [x for r in a_runs for x in r]
    b = [x for r in b_runs for x in r]
    assert judge(a, b).kind == NO_CHANGE  # unpaired: each side's blocks are 90% apart
    result = judge(a, b, pairs=pair_speedups(a_runs, b_runs))
    assert result.kind == IMPROVED and result.judged.allowance == RUN_TO_RUN
    assert result.pairs == [1.8, 1.8, 1.8]


def test_one_run_slowed_in_a_pair_cannot_make_a_change_only_hide_one():
    # Measured beside a hog: single runs 1.7-2.1x slower than the script's others. The same
    # script as both sides, one B run slowed: the pooled steps say slower, the pairs disagree.
    a_runs = [STEADY, STEADY, STEADY]
    b_runs = [STEADY, [x * 2.2 for x in STEADY], STEADY]
    a = [x for r in a_runs for x in r]
    b = [x for r in b_runs for x in r]
    result = judge(a, b, pairs=pair_speedups(a_runs, b_runs))
    # the pairs' geometric mean, from the smallest pair to the largest
    assert result.judged.speedup == pytest.approx((1 / 2.2) ** (1 / 3), abs=1e-3)
    assert (result.judged.low, result.judged.high) == (pytest.approx(1 / 2.2, abs=1e-3), 1.0)
    assert result.kind == NO_CHANGE and "disagree" in result.notes[0]
    # A real 2x gain whose second pair had its original slowed 2.2x still counts: every pair
    # shows it beyond 10% (measured: pairs of 2.61x, 1.28x and 4.34x for a fused Adam step).
    b_runs = [[x / 2 for x in STEADY]] * 3
    a_runs = [STEADY, [x * 2.2 for x in STEADY], STEADY]
    a = [x for r in a_runs for x in r]
    b = [x for r in b_runs for x in r]
    assert judge(a, b, pairs=pair_speedups(a_runs, b_runs)).kind == IMPROVED


def test_one_original_run_slowed_in_a_pair_cannot_make_a_gain():
    # The mirror of the case above: the same script as both sides, one A run slowed 2.2x by
    # load. The pooled steps say faster; the pairs (1.0x, 2.2x, 1.0x) disagree, and the
    # smallest pair, not the largest, decides whether every pair agrees on a gain.
    a_runs = [STEADY, [x * 2.2 for x in STEADY], STEADY]
    b_runs = [STEADY, STEADY, STEADY]
    a = [x for r in a_runs for x in r]
    b = [x for r in b_runs for x in r]
    result = judge(a, b, pairs=pair_speedups(a_runs, b_runs))
    assert result.judged.speedup > 1.2 and result.judged.high == 2.2
    assert result.pairs == [1.0, 2.2, 1.0]
    assert result.kind == NO_CHANGE and "disagree" in result.notes[0]


def test_a_gain_every_pair_shows_is_judged_from_the_pairs_not_from_steps_pooled_across_moments():
    # The demo beside a busy worker (CI): pairs of 6.0x and 1.6x, the second pair's 'after' run
    # loaded. Pooled, that run's slow steps weigh on its side's mean alone: 1.17x, an interval
    # from 0.56 to 3.19, NO CHANGE. Each pair shares its moment; both show the gain.
    a_runs = [[30.0] * 6, [30.0] * 6]
    b_runs = [[5.0] * 6, [5.0] * 5 + [400.0]]
    a = [x for r in a_runs for x in r]
    b = [x for r in b_runs for x in r]
    pairs = [6.0, 1.6]
    assert judge(a, b).kind == NO_CHANGE  # the pooled steps: the loaded run decides
    result = judge(a, b, pairs=pairs)
    assert result.kind == IMPROVED, result
    assert result.judged.speedup == pytest.approx((6.0 * 1.6) ** 0.5, abs=1e-3)
    assert (result.judged.low, result.judged.high) == (1.6, 6.0)
    # and a pair within the allowance keeps it unclear, whatever the other says
    assert judge(a, b, pairs=[6.0, 1.05]).kind == NO_CHANGE
    assert judge(b, a, pairs=[1 / 6.0, 1 / 1.6]).kind == REGRESSED
    assert judge(b, a, pairs=[1 / 6.0, 1 / 1.05]).kind == NO_CHANGE


def test_pairs_need_two_and_leave_out_runs_without_steps():
    assert pair_speedups([STEADY, []], [STEADY, STEADY]) == [1.0]
    one = judge(STEADY, STEADY, pairs=[1.0])  # one pair: judged as two records
    assert one.pairs == [] and one.kind == NO_CHANGE


def loaded(steps: list[float], others: float | None) -> RunRecord:
    """A record whose steps ran beside ``others`` cores of other processes' CPU."""
    from torchdoctor.record import SystemUsage

    r = record(steps)
    r.system = SystemUsage(1.0, 4, [50.0, 50.0], 50.0, 100.0, 0, 0.0, others_cpu_cores=others)
    return r


def test_a_change_the_load_explains_could_not_be_told():
    # The same script twice, beside bursts of another job's load, compared 1.24x.
    slowed = [x * 1.24 for x in STEADY]
    result = compare(loaded(slowed, 1.1), loaded(STEADY, 0.1))
    assert result.kind == "UNCLEAR" and result.judged.speedup > 1.2
    assert "other processes took 1.1 cores while A's steps were measured" in result.judged.why
    assert result.judged.why in result.notes
    assert compare(loaded(STEADY, 0.1), loaded(slowed, 1.1)).kind == "UNCLEAR"  # regressed
    # no change beside loads this far apart: the load may have hidden one
    assert compare(loaded(STEADY, 1.1), loaded(STEADY, 0.1)).kind == "UNCLEAR"


def test_a_change_against_the_load_or_beside_alike_loads_stands():
    slowed = [x * 1.24 for x in STEADY]
    # B faster although B ran the busier: the load, if anything, hid part of it
    assert compare(loaded(slowed, 0.1), loaded(STEADY, 1.1)).kind == IMPROVED
    assert compare(loaded(STEADY, 1.1), loaded(slowed, 0.1)).kind == REGRESSED
    # alike loads (a steady hog under both), a quiet machine, or a load not measured
    assert compare(loaded(slowed, 1.0), loaded(STEADY, 0.9)).kind == IMPROVED
    assert compare(loaded(slowed, 0.2), loaded(STEADY, 0.0)).kind == IMPROVED
    assert compare(loaded(slowed, None), loaded(STEADY, 1.0)).kind == IMPROVED  # B busier


def test_two_whole_runs_whose_loads_explain_their_wall_times_could_not_be_told():
    from torchdoctor.analysis.compare import whole_change
    from torchdoctor.record import WholeRun

    def whole(wall_s: float, others: float) -> RunRecord:
        r = loaded(STEADY, others)
        r.whole_run = WholeRun(wall_s=wall_s, goodput=0.5, steps=12)
        return r

    change = whole_change(whole(13.0, 1.2), whole(10.0, 0.1))
    assert change.kind == "UNCLEAR" and "A's steps were measured" in change.note
    assert whole_change(whole(13.0, 0.1), whole(10.0, 1.2)).kind == IMPROVED


def test_a_busy_run_against_one_whose_load_was_not_measured_could_not_be_told():
    # An older record, or steps and a run too short for the CPU counters: no figure of its load.
    slowed = [x * 1.24 for x in STEADY]
    unclear = compare(loaded(slowed, 1.1), loaded(STEADY, None))
    assert unclear.kind == "UNCLEAR" and "an unmeasured share during B's" in unclear.judged.why
    assert compare(loaded(slowed, None), loaded(STEADY, 1.1)).kind == IMPROVED  # against it
    assert compare(loaded(slowed, None), loaded(STEADY, None)).kind == IMPROVED  # nothing seen


def waited(steps: list[float], waited_ms: float | None) -> RunRecord:
    """A record on a machine whose load figure saw nothing, its threads having waited for a core
    ``waited_ms`` a step (``None``: not read)."""
    from torchdoctor.record import ThreadWaits

    r = loaded(steps, 0.1)
    if waited_ms is not None:
        # the training thread's waiting decides; torch's pool threads waited beside it
        total = waited_ms * len(steps) / 1e3
        r.system.waits = ThreadWaits(sum(steps) / 1e3, 0.1, total, 0.2, 3 * total)
    return r


def test_a_change_the_threads_waiting_for_cores_explains_could_not_be_told():
    # The same input-bound loop twice compared 0.80x while the load figures differed by less than
    # a quarter core: what the slower run's threads waited for cores tells it.
    slowed = [x * 1.25 for x in STEADY]  # 2.5 ms a step slower
    unclear = compare(waited(STEADY, 0.5), waited(slowed, 2.0))  # 1.5 ms more: over half
    assert unclear.kind == "UNCLEAR", unclear
    assert "thread waited for a core 0.5 ms a step in A and 2.0 ms in B" in unclear.judged.why
    assert compare(waited(slowed, 2.0), waited(STEADY, 0.5)).kind == "UNCLEAR"  # improved
    # waiting of less than half the change, or against it, leaves the judgement
    assert compare(waited(STEADY, 0.5), waited(slowed, 1.5)).kind == REGRESSED
    assert compare(waited(STEADY, 2.0), waited(slowed, 0.5)).kind == REGRESSED
    assert compare(waited(slowed, 0.5), waited(STEADY, 2.0)).kind == IMPROVED
    assert compare(waited(STEADY, None), waited(slowed, 9.0)).kind == REGRESSED  # not read
    # no change: waiting that differs by the allowance's share of the step could hide one
    assert compare(waited(STEADY, 0.2), waited(STEADY, 1.5)).kind == "UNCLEAR"
    assert compare(waited(STEADY, 1.5), waited(STEADY, 0.2)).kind == "UNCLEAR"
    assert compare(waited(STEADY, 0.2), waited(STEADY, 0.9)).kind == NO_CHANGE


def test_waiting_that_changed_with_the_threads_is_the_change_itself():
    # B runs fewer threads (the fix `--try threads` measures): it waits less, and that is why it
    # is faster; the waiting is no doubt then.
    import dataclasses

    from jobgen import rank_record

    env = rank_record(0, 0.0, 1.0, None, world_size=1).env
    slowed = [x * 1.25 for x in STEADY]
    a, b = waited(slowed, 2.0), waited(STEADY, 0.5)
    a.env, b.env = (
        dataclasses.replace(env, torch_threads=8),
        dataclasses.replace(env, torch_threads=2),
    )
    assert compare(a, b).kind == IMPROVED
    b.env = dataclasses.replace(env, torch_threads=8)
    assert compare(a, b).kind == "UNCLEAR"


def test_waiting_is_compared_per_sample_when_the_batches_differ():
    from torchdoctor.analysis.firmness import wait_doubt

    # B trains twice the samples a step in 1.5x the time (per A-sized step 7.5 ms against 10:
    # 2.5 ms faster); its thread waited 3 ms a step, 1.5 per A-sized step. A waiting 3.0 ms
    # (1.5 more than B) explains over half the gain: could not tell; A waiting 2.5 (1.0 more),
    # under half: the judgement stands. In raw steps B is slower and no gain could be doubted.
    b = waited([x * 1.5 for x in STEADY], 3.0)
    assert wait_doubt(IMPROVED, waited(STEADY, 3.0), b, 2.0, 0.1) != ""
    assert wait_doubt(IMPROVED, waited(STEADY, 2.5), b, 2.0, 0.1) == ""
    assert wait_doubt(IMPROVED, waited(STEADY, 3.0), b, 1.0, 0.1) == ""  # raw steps
