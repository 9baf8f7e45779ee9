"""What the capture takes for the training: real loops under a real capture session.

Modules a DataLoader calls while it makes a batch (torchvision-style transforms) are input, in
the main process or in workers, where the capture is inert and never raises; an optimizer's
step owns the calls of its closure (L-BFGS); fallback boundaries wait for evidence.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from torchdoctor.capture import StopRun
from torchdoctor.capture._boundary import (
    BACKWARDS_TO_DECIDE,
    BATCHES_TO_DECIDE,
    CLEARS_TO_DECIDE,
    FORWARDS_TO_DECIDE,
    OPTIMIZER_BUILT_FACTOR,
    StepBoundary,
)
from torchdoctor.capture._session import CaptureSession
from torchdoctor.options import RunOptions


class Normalize(nn.Module):
    def forward(self, x):
        return (x - 0.5) / 0.25


class Images(Dataset):
    def __init__(self):
        self.transform = Normalize()

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return self.transform(torch.full((4,), i / 64)), i % 2


def _session(**kw) -> CaptureSession:
    opts = dict(steps=1000, warmup=1000, sync_steps=0, counterfactuals=False, stop=False)
    opts.update(kw)
    session = CaptureSession(RunOptions(**opts))
    session.install()
    return session


def _train(loader, epochs=1):
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    return model


def test_module_transforms_in_the_main_process_are_input_not_the_model():
    session = _session()
    try:
        model = _train(DataLoader(Images(), batch_size=8))
        assert session.root_modules() == [model]
        assert session.boundary.kind == "optimizer"
        assert session.data.seen["forward_calls"] == 8  # the model's calls, not 64 transforms
        assert session.table[0].steps_done == 8
    finally:
        session.uninstall()


def test_workers_forked_from_a_captured_process_never_raise_the_stop():
    # A short run that stops the script: the workers, which call a module transform, must not
    # see the stop (they used to die with "DataLoader worker exited unexpectedly").
    session = _session(steps=2, warmup=1, stop=True)
    try:
        with pytest.raises(StopRun):
            _train(DataLoader(Images(), batch_size=4, num_workers=2), epochs=20)
        assert session.data.internal_error is None
        assert len(session.data.measured) == 2
    finally:
        session.uninstall()


def test_another_thread_is_not_measured():
    import threading

    session = _session()
    try:
        calls = []

        def elsewhere():
            model = nn.Linear(4, 1)
            model(torch.ones(2, 4)).sum().backward()
            calls.append(1)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert calls == [1]
        assert session.data.seen["forward_calls"] == 0
        assert session.data.seen["backward_calls"] == 0
    finally:
        session.uninstall()


def test_an_lbfgs_step_owns_its_closures_calls():
    session = _session()
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        optimizer = torch.optim.LBFGS(model.parameters(), max_iter=10)
        closure_calls = 0
        for _ in range(3):

            def closure():
                nonlocal closure_calls
                closure_calls += 1
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                return loss

            optimizer.step(closure)
        assert session.boundary.kind == "optimizer"
        assert session.table[0].steps_done == 3
        assert closure_calls > 3  # L-BFGS evaluated the closure more than once per step
        assert session.data.seen["backward_calls"] == closure_calls
        assert not any("no optimizer.step()" in n for n in session.data.notes)
    finally:
        session.uninstall()


def test_forward_fallback_needs_a_trainable_module_and_batches_flowing():
    boundary = StepBoundary()
    for _ in range(FORWARDS_TO_DECIDE * 2):
        boundary.forward_starting(True, False, trainable=False)
    assert boundary.kind is None  # a transform or a loss module is no model
    for _ in range(FORWARDS_TO_DECIDE):
        boundary.forward_starting(True, False, trainable=True, batches=BATCHES_TO_DECIDE - 1)
    assert boundary.kind is None  # still within the first batches
    boundary.forward_starting(True, False, trainable=True, batches=BATCHES_TO_DECIDE)
    assert boundary.kind == "forward"
    assert f"over {BATCHES_TO_DECIDE} batches" in boundary.evidence


def test_a_built_optimizer_asks_for_more_evidence():
    boundary = StepBoundary()
    boundary.optimizer_built = True
    for _ in range(FORWARDS_TO_DECIDE * OPTIMIZER_BUILT_FACTOR - 1):
        boundary.forward_starting(True, False)
    assert boundary.kind is None
    boundary.forward_starting(True, False)
    assert boundary.kind == "forward"


def test_manual_sgd_with_a_built_optimizer_waits_before_the_backward_fallback():
    session = _session()
    try:
        model = nn.Linear(4, 1)
        torch.optim.SGD(model.parameters(), lr=0.1)  # built, never stepped
        x = torch.randn(8, 4)
        for i in range(CLEARS_TO_DECIDE * OPTIMIZER_BUILT_FACTOR + 2):
            model.zero_grad()
            model(x).sum().backward()
            if i == CLEARS_TO_DECIDE + 1:
                assert session.boundary.kind is None
        assert session.boundary.kind == "backward"
        assert "never stepped" in session.boundary.evidence
    finally:
        session.uninstall()


def test_the_notes_describe_the_boundary_the_run_ended_with():
    session = _session()
    try:
        model = nn.Linear(4, 1)
        x = torch.randn(8, 4)
        for _ in range(FORWARDS_TO_DECIDE + 2):  # forward calls with gradients, no backward
            model(x)
        assert session.boundary.kind == "forward"
        assert any("no optimizer.step() and no backward" in n for n in session.data.notes)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        assert session.boundary.kind == "optimizer"
        assert not any("no optimizer.step() and no backward" in n for n in session.data.notes)
        assert any("moved to optimizer.step()" in n for n in session.data.notes)
    finally:
        session.uninstall()


def test_a_loop_that_never_updates_is_stepped_by_backward_and_told_so():
    session = _session()
    try:
        model = nn.Linear(4, 1)
        x = torch.randn(8, 4)
        before = model.weight.detach().clone()
        for _ in range(BACKWARDS_TO_DECIDE + 4):
            model(x).sum().backward()  # BACKWARD
        assert torch.equal(model.weight, before)
        assert session.boundary.kind == "backward" and session.boundary.never_updates
        assert session.table[0].steps_done >= 3
        (finding,) = session.data.loop_findings
        assert finding.kind == "loop.never-updates"
        lines = open(__file__).read().splitlines()
        assert "# BACKWARD" in lines[finding.line - 1]
        assert any("trains nothing" in n for n in session.data.notes)
    finally:
        session.uninstall()


def test_a_loop_whose_gradients_accumulate_but_which_updates_by_hand_is_not_never_updates():
    session = _session()
    try:
        model = nn.Linear(4, 1)
        x = torch.randn(8, 4)
        for _ in range(BACKWARDS_TO_DECIDE + 4):
            model(x).sum().backward()
            with torch.no_grad():
                model.weight.data.add_(-0.01)  # an update through .data, gradients kept
        assert session.boundary.kind == "backward"
        assert not session.boundary.never_updates
        assert session.data.loop_findings == []
    finally:
        session.uninstall()


def test_a_no_batch_note_from_early_steps_is_gone_once_batches_flow():
    # Two dry-run steps on a made-up batch (no DataLoader), then the real loop: the warmup's
    # search for a batch builder found none, but the measured steps draw batches.
    session = _session(steps=3, warmup=3)
    try:
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.zeros(2, 4)).sum().backward()
            optimizer.step()
        for x, y in DataLoader(Images(), batch_size=8):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        assert len(session.data.measured) == 3
        assert not any("draws no batch" in n for n in session.data.notes), session.data.notes
    finally:
        session.uninstall()
