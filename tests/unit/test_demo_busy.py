"""The demo's headline on a busy machine: the fixed pipeline against the script as written,
alternated, judged "could not tell" where the load can have made it slower or no faster."""

from __future__ import annotations

import pytest

from torchdoctor.analysis.compare import judge, pair_speedups
from torchdoctor.cli.demo.runner import unless_busy
from torchdoctor.record import IMPROVED, NO_CHANGE, REGRESSED, UNCLEAR


def side_by_side(before_ms: tuple[float, float], after_ms: tuple[float, float]):
    """Two pairs of runs of 8 steps each: each side's runs at the mean step given."""
    before = [[ms] * 8 for ms in before_ms]
    after = [[ms] * 8 for ms in after_ms]
    flat = [[x for run in runs for x in run] for runs in (before, after)]
    return judge(*flat, pairs=pair_speedups(before, after))


WAITS = {"before": [2.0, 4.0], "after": [30.0, 50.0]}


def test_slower_beside_other_processes_is_could_not_tell_with_the_load_and_the_waits():
    # beside two test workers: 0.41x, where a quiet machine measured 4.34x
    side = side_by_side((40.0, 42.0), (98.0, 102.0))
    assert side.kind == REGRESSED
    told = unless_busy(side, [1.4, 1.6, 1.5, 1.2], WAITS)
    assert told.kind == UNCLEAR
    assert told.judged.speedup == side.judged.speedup  # the figure is kept, its judgement not
    why = told.notes[0]
    assert why == told.judged.why and "1.6 cores" in why and "quieter moment" in why
    assert "waited 40 ms each" in why and "as written's 3 ms" in why


def test_no_clear_gain_beside_other_processes_is_could_not_tell_too():
    side = side_by_side((40.0, 42.0), (39.0, 41.5))
    assert side.kind == NO_CHANGE
    assert unless_busy(side, [0.9, None, 0.3, 0.2], WAITS).kind == UNCLEAR


@pytest.mark.parametrize("loads", [[0.1, 0.2, None, 0.05], [None, None, None, None]])
def test_on_a_quiet_machine_slower_is_slower(loads):
    side = side_by_side((40.0, 42.0), (98.0, 102.0))
    assert unless_busy(side, loads, WAITS) == side


def test_a_gain_beside_other_processes_stands_its_figure_that_moments():
    side = side_by_side((100.0, 120.0), (30.0, 31.0))
    told = unless_busy(side, [1.3, 0.9, 1.1, 1.0], {"before": [], "after": []})
    assert told.kind == IMPROVED and told.judged == side.judged
    assert told.notes[-1].startswith("measured while other processes took up to 1.3 cores")
