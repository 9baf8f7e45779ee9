"""What capture costs is counted in the run: torchdoctor's own work in its hooks, never the
script's work that runs inside them (the DataLoader's ``__next__``, a backward)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from hog import spin
from torchdoctor.capture._cost import COST_FIRST_STEPS, COST_PERIOD, CostSample, costs_step
from torchdoctor.capture._session import CaptureSession
from torchdoctor.options import RunOptions

#: CPU work injected into the script's own work: far above any hook's cost.
SLEEP_S = 0.03
#: Measured steps: past the first ones, into the sampled ones.
STEPS = COST_PERIOD + 2


class SlowSamples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        spin(SLEEP_S)  # the loader's work, inside torchdoctor's __next__ wrapper
        return torch.randn(4), i % 2


class SlowModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x):
        spin(SLEEP_S)  # the model's work, between torchdoctor's forward hooks
        return self.layer(x)


def trained(session: CaptureSession, model: nn.Module, loader: DataLoader) -> dict:
    """The session installed around a training loop over ``loader`` until its phases are done;
    its ``overhead_ms``."""
    session.install()
    try:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            if session.phase_name == "done":
                break
        return session.data.overheads_ms()
    finally:
        session.uninstall()


# the warmup's last step timed (1) or not (5): the measured phase starts in the optimizer's
# hook, and its slow start is torchdoctor's work between steps either way
@pytest.mark.parametrize("warmup", [1, 5])
def test_the_cost_per_step_counts_our_hooks_and_not_the_scripts_work(slow_measure_start, warmup):
    slow_measure_start(SLEEP_S * 3)
    session = CaptureSession(
        RunOptions(steps=STEPS, warmup=warmup, sync_steps=0, counterfactuals=False, stop=False)
    )
    overheads = trained(session, SlowModel(), DataLoader(SlowSamples(), batch_size=1))
    # The first steps are timed, then a sample: each step timed stands for those untimed since
    # the one before, so the steps counted run to the last one timed (COST_PERIOD here).
    assert session.data.capture_cost_steps == COST_PERIOD
    cost = overheads["capture_per_step_ms"]
    # Each step spun 2 x 30 ms in the script's work, and the switch 90 ms: none of it is ours.
    assert 0 < cost < SLEEP_S * 1000 / 3, overheads


def test_the_hooks_time_themselves_in_the_first_steps_then_in_two_of_every_period():
    timed = [i for i in range(1, 3 * COST_PERIOD + 1) if costs_step(i)]
    assert timed[:COST_FIRST_STEPS] == list(range(1, COST_FIRST_STEPS + 1))
    later = [i for i in timed if i > COST_FIRST_STEPS]
    # two in a row (the first lets the second be timed from its start), once per period
    assert later == [i for p in range(1, 4) for i in (p * COST_PERIOD - 1, p * COST_PERIOD)]


def test_a_counted_step_stands_for_the_untimed_steps_since_the_last_counted_one():
    sample = CostSample()
    sample.phase_started()
    weights = []
    for _ in range(3 * COST_PERIOD):
        timed = sample.next_timed()
        weights.append(sample.step_ended(timed))
    # every first step counts once; then the second of each timed pair, for its whole period
    first = COST_PERIOD - COST_FIRST_STEPS
    assert weights[:COST_FIRST_STEPS] == [1] * COST_FIRST_STEPS
    assert [w for w in weights[COST_FIRST_STEPS:] if w] == [first, COST_PERIOD, COST_PERIOD]
    assert sum(weights) == 3 * COST_PERIOD


def test_a_step_is_not_counted_unless_the_one_before_it_was_timed():
    sample = CostSample()
    sample.phase_started()
    for _ in range(COST_FIRST_STEPS):
        sample.step_ended(True)
    assert sample.step_ended(False) == 0
    assert sample.step_ended(True) == 0  # its start ran untimed, in the last hook before it
    assert sample.step_ended(True) == 3  # the untimed one and the one after it, and itself
    # a new phase counts its first step whatever came before (a window of one step has a cost)
    sample.step_ended(False)
    sample.phase_started()
    assert sample.step_ended(True) == 1


def test_run_whole_samples_its_measured_window_and_its_watched_steps_each_from_their_start():
    """``run --whole``: one phase for the whole run, but the measured window and the steps
    watched after it each have their own sample, numbered from their first step."""
    warmup, watched = 1, COST_FIRST_STEPS + 1
    session = CaptureSession(RunOptions(whole=True, stop=False, warmup=warmup, steps=STEPS))
    session.install()
    try:
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = [(torch.randn(2, 4), torch.tensor([0, 1]))] * (warmup + STEPS + watched)
        for x, y in data:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    finally:
        session.uninstall()
    assert session.hooks.lean  # the window ended: the last steps were watched
    # each counts its first steps, then the last timed one of its first period (as one phase);
    # numbered on from warmup instead, the window would count 7 of its steps, and numbered on
    # from the window, the watched steps none
    assert session.data.capture_cost_steps == COST_PERIOD
    assert session.data.watch_cost_steps == COST_FIRST_STEPS


def test_a_counted_steps_clock_reads_count_once_not_for_each_step_it_stands_for():
    sample = CostSample()
    sample.read_ns = 1_000
    # 20 us timed by 10 pairs of reads: 10 us of work in each of the 15 steps, the reads once
    assert sample.counted_ns(20_000, 10, 15) == 10_000 * 15 + 10_000
    # a figure below its reads (a read cheaper than the median) is the reads', once
    assert sample.counted_ns(4_000, 10, 15) == 4_000


def test_the_figure_never_counts_more_clock_than_was_read(monkeypatch):
    # A clock that moves 50 us at each read and never else: the hooks' own work is invisible
    # to it, so all the cost it gives is its reads'. Counted once each at most, they are at
    # most what was read over the steps; extrapolated to the untimed steps (as before the
    # correction), a timed step's dozen pairs of reads stood for 16 steps.
    from torchdoctor.capture import _cost, _session, _step_hooks

    reads = [0]

    def clock() -> int:
        reads[0] += 1
        return reads[0] * 50_000

    for module in (_cost, _session, _step_hooks):
        monkeypatch.setattr(module, "cost_clock_ns", clock)
    steps = 4 * COST_PERIOD
    session = CaptureSession(
        RunOptions(steps=steps, warmup=1, sync_steps=0, counterfactuals=False, stop=False)
    )
    assert session._cost_sample.read_ns == 50_000  # calibrated on the clock as it is
    data = [(torch.randn(2, 4), torch.tensor([0, 1]))] * (steps + 4)
    reads[0] = 0
    overheads = trained(session, nn.Linear(4, 2), DataLoader(data, batch_size=None))
    counted = overheads["capture_per_step_ms"] * session.data.capture_cost_steps
    assert 0 < counted <= reads[0] * 0.050, (overheads, reads[0])
