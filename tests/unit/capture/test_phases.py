"""The phase table: adding a phase is one class and one entry, and the session runs it in place.

A toy phase counts steps between warmup and measure in a real training loop; the session must
start it after warmup, hand it its steps, finish and close it, and go on to measure.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.capture._session import CaptureSession, StopRun
from torchdoctor.capture.phases import PHASES, MeasurePhase, Phase, WarmupPhase
from torchdoctor.options import RunOptions

EVENTS: list[str] = []


class CountingPhase(Phase):
    name = "toy"

    def total(self, session) -> int:
        return 3

    def start(self, session) -> None:
        EVENTS.append("start")

    def on_step(self, session, step) -> bool:
        EVENTS.append(f"step:{step.batches}")
        return super().on_step(session, step)

    def finish(self, session) -> None:
        EVENTS.append("finish")

    def close(self, session) -> None:
        EVENTS.append("close")


class NeverWanted(Phase):
    name = "never"

    def wanted(self, session) -> bool:
        return False

    def start(self, session) -> None:  # pragma: no cover - must not run
        EVENTS.append("never-started")


def _train(steps: int) -> None:
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4)
    done = 0
    while done < steps:
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            done += 1
            if done >= steps:
                return


def test_a_toy_phase_runs_in_its_place_in_the_table():
    EVENTS.clear()
    table = list(PHASES)
    table.insert(table.index(MeasurePhase), CountingPhase)
    table.insert(table.index(MeasurePhase), NeverWanted)
    seen_phases: list[str] = []
    session = CaptureSession(
        RunOptions(steps=2, warmup=2, sync_steps=0, counterfactuals=False),
        progress=lambda phase, done, total: seen_phases.append(phase),
        phases=table,
    )
    session.install()
    try:
        _train(50)
        raise AssertionError("the session should have stopped the script")
    except StopRun:
        pass
    finally:
        session.uninstall()
    assert EVENTS == ["start", "step:1", "step:1", "step:1", "finish", "close"]
    order = list(dict.fromkeys(seen_phases))
    assert order == ["warmup", "toy", "measure"]
    assert len(session.data.measured) == 2 and session.phase_name == "done"


def test_phases_left_half_way_are_closed_on_uninstall():
    EVENTS.clear()
    session = CaptureSession(
        RunOptions(steps=2, warmup=1, sync_steps=0),
        phases=[WarmupPhase, CountingPhase, MeasurePhase],
    )
    session.install()
    try:
        _train(2)  # warmup, then one of the toy phase's three steps: the script ends
    finally:
        session.uninstall()
    assert EVENTS == ["start", "step:1", "close"]
    assert session.phase_name == "toy"


class ProbedAtStart(Phase):
    """Notes, as the measured steps would start, whether the script's state was probed."""

    name = "probed?"

    def start(self, session) -> None:
        EVENTS.append(f"model:{session.state.model is not None}")
        EVENTS.append(f"optimizer:{session.state.optimizer_probed}")

    def total(self, session) -> int:
        return 1


def _trained(warmup: int, *phases: type[Phase]) -> CaptureSession:
    """A session over the training loop until it stops it (its phases, or the default table)."""
    options = RunOptions(steps=2, warmup=warmup, sync_steps=0, counterfactuals=False)
    session = CaptureSession(options, phases=phases) if phases else CaptureSession(options)
    session.install()
    try:
        _train(50)
    except StopRun:
        pass
    finally:
        session.uninstall()
    return session


def test_the_scripts_state_is_probed_in_the_warmup_not_in_a_measured_step():
    # Probing (the model's call site, autocast) took 0.4 ms of the demo's first measured step.
    # (the optimizer whose step ends a step is known from the first step's end: a warmup of two
    # probes both)
    EVENTS.clear()
    _trained(2, WarmupPhase, ProbedAtStart, MeasurePhase)
    assert EVENTS == ["model:True", "optimizer:True"]
    # without a warmup, the first measured step probes it
    session = _trained(0)
    assert session.state.model is not None and session.state.optimizer_probed
