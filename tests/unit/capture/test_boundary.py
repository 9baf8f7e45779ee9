"""Where a step ends in loops without an optimizer: real loops under a real capture session.

Each loop trains a small model for a bounded number of iterations; the session must cut the
expected number of steps, with the expected number of backward calls in each, and say which
boundary it used.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchdoctor.capture._boundary import CLEARS_TO_DECIDE, FORWARDS_TO_DECIDE, StepBoundary
from torchdoctor.capture._session import CaptureSession
from torchdoctor.options import RunOptions


def _session() -> CaptureSession:
    # stop=False: the loop runs to its end; the session counts what it cut.
    options = RunOptions(steps=1000, warmup=1000, sync_steps=0, counterfactuals=False, stop=False)
    session = CaptureSession(options)
    session.install()
    return session


def _steps(session: CaptureSession) -> int:
    return session.table[0].steps_done  # the warmup phase takes every step here


def _manual_sgd(iterations: int, accumulate: int = 1, clear: str = "zero_grad") -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    for i in range(iterations):
        if i % accumulate == 0:
            if clear == "zero_grad":
                model.zero_grad()
            elif clear == "zero_":
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.zero_()
        nn.functional.mse_loss(model(x), y).backward()
        if (i + 1) % accumulate == 0:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.01)


@pytest.mark.parametrize("clear", ["zero_grad", "zero_"])
def test_a_manual_sgd_loop_has_a_step_per_backward(clear):
    session = _session()
    try:
        _manual_sgd(12, clear=clear)
    finally:
        session.uninstall()
    assert session.boundary.kind == "backward"
    assert session.boundary.backwards_per_step == 1
    # The boundary is known at the backward after the second clear; every backward from then on
    # ends a step, cut at the script's next call (the last one, after the loop, never comes).
    assert _steps(session) == 12 - CLEARS_TO_DECIDE - 1
    assert any("no optimizer.step() seen" in n for n in session.data.notes)


def test_accumulated_backwards_without_an_optimizer_stay_one_step():
    session = _session()
    try:
        _manual_sgd(24, accumulate=3)
    finally:
        session.uninstall()
    assert session.boundary.kind == "backward"
    assert session.boundary.backwards_per_step == 3
    # Clears at iterations 3 and 6 decide it; 18 iterations remain, 6 steps of 3 backwards, the
    # last of which is never cut (no call of the script follows it).
    assert _steps(session) == 5
    assert any("3 calls" in n for n in session.data.notes)


def test_gradient_accumulation_with_an_optimizer_keeps_the_optimizer_boundary():
    session = _session()
    try:
        torch.manual_seed(0)
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        for _ in range(5):
            for _ in range(8):  # more backwards per step than any threshold of the fallback
                nn.functional.mse_loss(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
    finally:
        session.uninstall()
    assert session.boundary.kind == "optimizer"
    assert _steps(session) == 5
    assert not any("no optimizer.step()" in n for n in session.data.notes)


def test_a_loop_that_never_clears_its_gradients_is_not_cut_at_backward():
    session = _session()
    try:
        model = nn.Linear(8, 1)
        x = torch.randn(4, 8)
        for _ in range(10):
            model(x).sum().backward()  # gradients pile up: nothing tells steps apart
    finally:
        session.uninstall()
    assert session.boundary.kind is None
    assert _steps(session) == 0


def test_model_calls_with_gradients_on_and_no_backward_are_steps():
    session = _session()
    try:
        model = nn.Linear(8, 1)
        x = torch.randn(4, 8)
        for _ in range(FORWARDS_TO_DECIDE + 5):
            model(x)
    finally:
        session.uninstall()
    assert session.boundary.kind == "forward"
    assert _steps(session) == 6  # the deciding call ends the first step, then one per call
    assert any("a step is one call of the outermost model" in n for n in session.data.notes)


def test_inference_under_no_grad_is_not_training():
    session = _session()
    try:
        model = nn.Linear(8, 1)
        with torch.no_grad():
            for _ in range(FORWARDS_TO_DECIDE * 3):
                model(torch.randn(4, 8))
    finally:
        session.uninstall()
    assert session.boundary.kind is None
    assert _steps(session) == 0


def test_an_optimizer_seen_later_takes_the_boundary_over():
    boundary = StepBoundary()
    for _ in range(FORWARDS_TO_DECIDE):
        boundary.forward_starting(grad_enabled=True, backward_seen=False)
    assert boundary.kind == "forward"
    assert boundary.optimizer_stepped() is True  # moved
    assert boundary.kind == "optimizer"
    assert boundary.optimizer_stepped() is False
    assert boundary.describe() is None


def test_reentrant_backward_counts_once():
    session = _session()
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
        x = torch.randn(4, 8, requires_grad=True)
        from torch.utils.checkpoint import checkpoint

        for _ in range(6):
            model.zero_grad()
            checkpoint(model, x, use_reentrant=True).sum().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.01)
    finally:
        session.uninstall()
    assert session.boundary.backwards_per_step == 1
    assert _steps(session) == 6 - CLEARS_TO_DECIDE - 1


def test_the_sync_finder_ends_cleanly_at_a_backward_boundary():
    # Backward runs under the sync finder's function mode with the mode taken off the stack; a
    # phase ended right there would leave the mode behind (the hygiene fixture checks it).
    options = RunOptions(steps=2, warmup=1, sync_steps=2, counterfactuals=False, stop=False)
    session = CaptureSession(options)
    session.install()
    try:
        _manual_sgd(12)
    finally:
        session.uninstall()
    assert session.boundary.kind == "backward"
    assert len(session.data.measured) == 2


def test_a_loop_over_plain_tensors_without_a_module_has_steps():
    # The tutorial shape: weights are tensors with requires_grad, updated by hand under no_grad.
    session = _session()
    try:
        torch.manual_seed(0)
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        w1 = torch.randn(8, 8, requires_grad=True)
        w2 = torch.randn(8, 1, requires_grad=True)
        for _ in range(10):
            loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            loss.backward()
            with torch.no_grad():
                for w in (w1, w2):
                    w -= 1e-4 * w.grad
                    w.grad.zero_()
    finally:
        session.uninstall()
    assert session.boundary.kind == "backward"
    assert session.boundary.watched() is not None
    assert _steps(session) == 10 - CLEARS_TO_DECIDE - 1
