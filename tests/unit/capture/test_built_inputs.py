"""Loops that build their batches themselves: the builder is found, timed as input, replayed.

Real loops under a real capture session. The builders carry an injected cost (a sleep far above
the tiny model's step) so that "the build is input" and "data made free is faster" are
unambiguous on a loaded machine.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torch import nn

from hog import spin
from torchdoctor.analysis.verdict import summarise
from torchdoctor.capture._cost import COST_PERIOD
from torchdoctor.capture._session import CaptureSession, StopRun
from torchdoctor.options import RunOptions
from torchdoctor.record import INPUT_BOUND, RunRecord

#: Seconds each: left out of `make test-fast`.
pytestmark = pytest.mark.slow

BUILD_S = 0.04
TOKENS = np.arange(10_000, dtype=np.uint16) % 97


def get_batch(block: int = 16, batch: int = 4, cpu: bool = False):
    import time

    if cpu:  # the same cost as CPU work: the clock capture's cost is read on counts it
        spin(BUILD_S)
    else:
        time.sleep(BUILD_S)
    ix = torch.randint(len(TOKENS) - block, (batch,))
    x = torch.stack([torch.from_numpy(TOKENS[i : i + block].astype(np.int64)) for i in ix])
    return x.float(), x[:, :1].float()


class Source:
    def next_batch(self):
        return get_batch()


def _model():
    torch.manual_seed(0)
    return nn.Linear(16, 1)


def _run(loop, **options) -> CaptureSession:
    opts = dict(steps=4, warmup=4, sync_steps=0, counterfactuals=True, loader_doctor="never")
    opts.update(options)
    session = CaptureSession(RunOptions(**opts))
    session.install()
    try:
        loop()
    except StopRun:
        pass
    finally:
        session.uninstall()
    return session


def _plain_loop(iterations: int = 60) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(iterations):
        x, y = get_batch()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def _prefetch_loop(iterations: int = 60) -> None:
    """nanoGPT's order: the next batch is fetched between forward and backward."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = get_batch()
    for _ in range(iterations):
        loss = nn.functional.mse_loss(model(x), y)
        x, y = get_batch()
        loss.backward()
        opt.step()
        opt.zero_grad()


def _record(session: CaptureSession) -> RunRecord:
    record = RunRecord(
        steps=session.measured_series(),
        model_alone=session.model_alone_step_ms(),
        built_inputs=session.inputs.described(),
        seen=dict(session.data.seen),
    )
    summarise(record)
    return record


@pytest.mark.parametrize("loop", [_plain_loop, _prefetch_loop])
def test_the_builder_is_timed_as_input_and_replayed(loop):
    session = _run(loop)
    assert session.inputs.described() == [
        f"get_batch ({__file__}:{get_batch.__code__.co_firstlineno})"
    ]
    record = _record(session)
    assert record.measured_steps == 4 and len(record.model_alone) == 4
    # The sleep is the step: nearly all of it is data wait, and replayed batches remove it.
    assert record.verdict.shares["input"] > 0.6
    assert record.verdict.kind == INPUT_BOUND
    assert "building its batches (get_batch" in record.verdict.why
    assert "memmap" in record.verdict.next
    assert record.ceiling_speedup > 2
    assert any("timed as data wait" in n for n in session.data.notes)


def test_the_wrapper_and_the_profile_function_are_gone_after_the_run():
    original = get_batch
    session = _run(_plain_loop)
    assert session.inputs.builders  # it was wrapped while the session ran
    assert sys.modules[__name__].get_batch is original
    assert sys.getprofile() is None


def test_a_method_that_builds_batches_is_found_on_its_class():
    original = Source.next_batch
    source = Source()

    def loop():
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for _ in range(60):
            x, y = source.next_batch()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()

    session = _run(loop)
    names = session.inputs.described()
    assert any(n.startswith("Source.next_batch") for n in names)
    assert _record(session).verdict.kind == INPUT_BOUND
    assert Source.__dict__["next_batch"] is original


def test_a_nested_builder_is_named_but_not_timed():
    def loop():
        def make():  # defined inside the loop's function: nothing to wrap
            return get_batch.__wrapped__() if hasattr(get_batch, "__wrapped__") else get_batch()

        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for _ in range(60):
            x, y = make()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()

    session = _run(loop, counterfactuals=False)
    notes = " ".join(session.data.notes)
    assert "defined inside another one" in notes and "make" in notes


def test_a_loop_fed_by_a_dataloader_is_not_searched():
    from torch.utils.data import DataLoader, TensorDataset

    def loop():
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = DataLoader(TensorDataset(torch.randn(400, 16), torch.randn(400, 1)), batch_size=4)
        for x, y in loader:
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()

    session = _run(loop)
    assert not session.inputs.searched
    assert session.inputs.builders == []


def test_another_profiler_is_left_alone():
    calls = []

    def theirs(frame, event, arg):
        calls.append(event)

    sys.setprofile(theirs)
    try:
        session = _run(_plain_loop, counterfactuals=False)
        assert sys.getprofile() is theirs
    finally:
        sys.setprofile(None)
    assert session.inputs.builders == []
    assert any("another profiler is active" in n for n in session.data.notes)


def test_a_loop_on_a_fixed_batch_says_no_builder_was_found():
    def loop():
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(4, 16), torch.randn(4, 1)
        for _ in range(30):
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()

    session = _run(loop, counterfactuals=False)
    assert session.inputs.builders == []
    assert sys.getprofile() is None
    assert any(
        "no function of the script returned the model's input" in n for n in session.data.notes
    )


# the warmup's last step is timed (4) or not (5): the measured phase starts in a hook that
# started timed, or in one that did not and times itself from the switch on
@pytest.mark.parametrize("warmup", [4, 5])
def test_a_step_that_ends_in_the_builder_counts_its_hook_and_not_the_scripts_work(
    slow_measure_start, warmup
):
    """Without an optimizer a step ends at the script's next call after its backward: here, its
    batch function. The phase switch that runs there is torchdoctor's work between steps, taken
    out of the hook it runs in; the builder's own work is the script's. Neither is capture's
    cost per step."""
    slow_measure_start(BUILD_S * 3)

    def loop() -> None:
        model = _model()
        for _ in range(40):
            x, y = get_batch(cpu=True)
            nn.functional.mse_loss(model(x), y).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 1e-3 * p.grad
                    p.grad = None

    session = _run(loop, steps=COST_PERIOD + 2, warmup=warmup, counterfactuals=False)
    assert session.inputs.described() and session.boundary.kind == "backward"
    assert session.data.capture_cost_steps == COST_PERIOD
    cost = session.data.overheads_ms()["capture_per_step_ms"]
    # the switch (120 ms, once) or the builder's 40 ms in every step would be far above this
    assert 0 < cost < BUILD_S * 1000 / 4, cost
