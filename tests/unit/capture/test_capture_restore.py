"""Every patch is undone: on normal exit, on error inside install, and after a failed script."""

from __future__ import annotations

import pytest
import torch

from torchdoctor.capture import CaptureSession, active_session
from torchdoctor.capture._patch import Patcher
from torchdoctor.options import RunOptions


def test_patcher_restores_inherited_and_own_attributes():
    class Base:
        def f(self):
            return "base"

    class Child(Base):
        def g(self):
            return "own"

    p = Patcher()
    p.set(Child, "f", lambda self: "patched")
    p.set(Child, "g", lambda self: "patched")
    assert Child().f() == Child().g() == "patched"
    assert p.restore() == []
    assert "f" not in vars(Child) and Child().f() == "base" and Child().g() == "own"
    assert p.restore() == []  # idempotent


def test_patcher_keeps_undoing_after_a_failure():
    p = Patcher()
    calls = []
    p.on_restore(lambda: calls.append("first"))
    p.on_restore(lambda: 1 / 0)
    p.on_restore(lambda: calls.append("last"))
    errors = p.restore()
    assert calls == ["last", "first"] and len(errors) == 1


def test_a_child_patcher_knows_its_parents_wrappers_and_is_undone_with_it():
    class Box:
        def f(self):
            return "f"

        def g(self):
            return "g"

    original = Box.f
    parent = Patcher()

    def wrapper(self):
        return "wrapped"

    parent.set(Box, "f", wrapper)
    child = parent.child()
    assert child.original(wrapper) is original  # what a torch function mode is handed
    assert child.original(original) is original
    child.set(Box, "g", lambda self: "patched")
    assert parent.restore() == []
    assert Box().g() == "g" and Box.f is original
    assert child.original(wrapper) is wrapper  # forgotten once undone


def test_a_sync_watcher_inside_a_session_patches_through_the_session():
    from torchdoctor.capture.syncs import SyncWatcher

    before = vars(torch.Tensor).get("__new__")
    session = CaptureSession(RunOptions(), progress=None)
    session.install()
    try:
        watcher = SyncWatcher(on_accelerator=False)
        watcher.start()
        assert vars(torch.Tensor).get("__new__") is not before
    finally:
        session.uninstall()  # the watcher was never stopped: the session's restore undoes it
    assert vars(torch.Tensor).get("__new__") is before
    watcher.stop()  # and a late stop is harmless


def test_failed_install_is_fully_undone(monkeypatch):
    session = CaptureSession(RunOptions())

    def boom():
        raise RuntimeError("hook registration failed")

    import torch.optim.optimizer as optimizer_mod

    monkeypatch.setattr(optimizer_mod, "register_optimizer_step_post_hook", lambda fn: boom())
    with pytest.raises(RuntimeError, match="hook registration failed"):
        session.install()
    assert active_session() is None
    assert not session.installed
    monkeypatch.undo()  # the fixture then checks that torch is as it was


def test_one_session_at_a_time():
    first = CaptureSession(RunOptions())
    first.install()
    try:
        with pytest.raises(RuntimeError, match="already active"):
            CaptureSession(RunOptions()).install()
    finally:
        first.uninstall()
    assert active_session() is None


def test_uninstall_after_user_error_mid_step():
    session = CaptureSession(RunOptions(steps=2, warmup=0))
    session.install()
    model = torch.nn.Linear(4, 2)
    try:
        with pytest.raises(ValueError):
            with torch.autograd.set_grad_enabled(True):
                model(torch.randn(1, 4))
                raise ValueError("user bug")
    finally:
        session.uninstall()


def test_a_whole_run_is_undone_with_its_sampler_thread_and_workers():
    """run --whole's own patches (torch.save, Module.train), its stack sampler and the script's
    DataLoader workers are gone after uninstall (the hygiene fixture checks torch and threads)."""
    import io

    from torch.utils.data import DataLoader, TensorDataset

    session = CaptureSession(RunOptions(whole=True, stop=False, warmup=1, steps=2))
    session.install()
    try:
        assert torch.save is not vars(torch.serialization)["save"]
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
        for _ in range(2):
            for x, y in DataLoader(data, batch_size=8, num_workers=2):
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                model(x)
            model.train()
            torch.save(model.state_dict(), io.BytesIO())
        assert session.whole.steps == 8 and session.whole.evaluation.count == 2
    finally:
        session.uninstall()
    assert torch.save is vars(torch.serialization)["save"]


def test_a_hooked_model_pickles_and_copies_without_torchdoctors_hooks():
    """``torch.save(model)`` and ``copy.deepcopy(model)`` in the middle of a diagnosis: the
    model's state leaves torchdoctor's hooks and a trial's ``forward`` out (they hold the
    session, or are local functions); the script's own hook stays; after the session,
    Module.__getstate__ is torch's again."""
    import copy
    import io
    import pickle

    original = torch.nn.Module.__getstate__
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    model.register_forward_hook(_script_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    session = CaptureSession(RunOptions(steps=3, warmup=1, stop=False, sync_steps=0))
    session.install()
    try:
        for _ in range(4):  # past warmup: the outermost module carries the session's hooks
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
        assert len(model._forward_pre_hooks) == 1 and len(model._forward_hooks) == 2
        trial = Patcher.for_process()  # as the compile trial replaces the model's forward
        trial.set(model, "forward", lambda *args: None)
        torch.save(model, io.BytesIO())
        loaded = pickle.loads(pickle.dumps(model))
        twin = copy.deepcopy(model)
        for other in (loaded, twin):
            assert not other._forward_pre_hooks
            assert list(other._forward_hooks.values()) == [_script_hook]
            assert "forward" not in vars(other)
        assert len(model._forward_hooks) == 2  # the live model keeps them
        trial.restore()
    finally:
        session.uninstall()
    assert torch.nn.Module.__getstate__ is original


def _script_hook(module, args, output):
    return None
