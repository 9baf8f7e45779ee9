"""SyncWatcher: lifecycle across call stacks, ignore(), the batch callback, the public helpers."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import torchdoctor
from torchdoctor.capture._frames import file_kind, is_user_file, user_site
from torchdoctor.capture.syncs import SyncWatcher, find_syncs, watch_syncs

HERE = Path(__file__).resolve()
CPU = torch.device("cpu")  # stands in for the accelerator on a CPU run

# The first optimizer step imports torch._dynamo lazily, which rebinds torch attributes; do it
# before the hygiene fixture takes its snapshot.
torch.manual_seed(0)
torch.optim.Adam(nn.Linear(1, 1).parameters()).step()


def lineno_of(text: str, path: Path = HERE) -> int:
    """Line number of the first line of ``path`` containing ``text``."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return n
    raise AssertionError(text)


def installed_state():
    return (
        len(_get_current_function_mode_stack()),
        len(_get_current_dispatch_mode_stack()),
        "__new__" in vars(torch.Tensor),
        torch.cuda.synchronize,
        torch.from_numpy,
    )


# -- start() in one call, stop() in another ------------------------------------------------


def hook_that_starts(watcher: SyncWatcher) -> None:
    watcher.start()


def hook_that_stops(watcher: SyncWatcher) -> None:
    watcher.stop()


def user_code_that_raises(t: torch.Tensor) -> None:
    t.sum().item()
    raise ValueError("user bug")


def test_start_and_stop_from_different_frames_restore_everything_even_after_an_error():
    before = installed_state()
    weights = torch.ones(3, requires_grad=True)
    watcher = SyncWatcher(on_accelerator=False)
    hook_that_starts(watcher)
    assert installed_state() != before
    assert _get_current_function_mode_stack()[-1] is watcher._mode
    with pytest.raises(ValueError):
        user_code_that_raises(weights)
    hook_that_stops(watcher)
    assert installed_state() == before
    hook_that_stops(watcher)  # idempotent
    assert installed_state() == before
    assert [e.kind for e in watcher.events] == ["item"]


def test_stop_keeps_a_mode_the_user_pushed_above_ours():
    class UserMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    before = len(_get_current_function_mode_stack())
    watcher = SyncWatcher(on_accelerator=False)
    hook_that_starts(watcher)
    user_mode = UserMode()
    user_mode.__enter__()  # the user's code leaves its own mode on top of ours
    hook_that_stops(watcher)
    stack = _get_current_function_mode_stack()
    assert stack[-1] is user_mode and watcher._mode is None
    assert len(stack) == before + 1
    user_mode.__exit__(None, None, None)
    assert len(_get_current_function_mode_stack()) == before


def test_context_manager_restores_on_error_and_start_is_idempotent():
    before = installed_state()
    with pytest.raises(RuntimeError):
        with SyncWatcher(on_accelerator=False) as watcher:
            watcher.start()
            assert len(_get_current_function_mode_stack()) == before[0] + 1
            raise RuntimeError("boom")
    assert installed_state() == before


def test_stopped_watcher_records_nothing():
    watcher = SyncWatcher(on_accelerator=False)
    watcher.start()
    watcher.stop()
    torch.ones(2, requires_grad=True).sum().item()
    assert watcher.events == []


# -- what is recorded ------------------------------------------------------------------------


def test_mark_step_numbers_events_and_counts_steps():
    w = torch.ones(3, requires_grad=True)
    watcher = SyncWatcher(on_accelerator=False)
    with watcher:
        for _ in range(3):
            w.sum().item()
            watcher.mark_step()
    assert [e.step for e in watcher.events] == [0, 1, 2]
    assert watcher.steps == 3
    (finding,) = watcher.findings()
    assert finding.calls_per_step == 1.0
    assert finding.line == lineno_of("w.sum().item()")


def test_ignore_excludes_the_runners_own_work():
    w = torch.ones(3, requires_grad=True)
    watcher = SyncWatcher(on_accelerator=False)
    with watcher:
        with watcher.ignore():
            w.sum().item()
            torch.tensor([1.0, 2.0, 3.0]).to("cpu")
        w.sum().item()  # the user's
    assert [(e.kind, e.line) for e in watcher.events] == [
        ("item", lineno_of("w.sum().item()  # the user's"))
    ]


def test_batch_tensors_are_host_side_until_moved():
    labels = torch.randint(0, 10, (8,))
    watcher = SyncWatcher(on_accelerator=False, is_batch_tensor=lambda t: t is labels)
    with watcher:
        host_view = labels.tolist()  # before the move: host work, not a sync
        top = labels.max().item()  # also host work
        moved = labels.to(CPU)  # the batch copy: "to device", not a finding
        moved.max().item()  # after the move: a sync
    assert host_view and top >= 0
    assert [(e.kind, e.line) for e in watcher.events] == [("item", lineno_of("moved.max().item()"))]


def test_batch_moved_inside_ignore_counts_as_moved():
    labels = torch.randint(0, 10, (8,))
    watcher = SyncWatcher(on_accelerator=False, is_batch_tensor=lambda t: t is labels)
    with watcher:
        with watcher.ignore():
            labels = labels.to(CPU)
        assert labels.max() < 10
    assert [e.kind for e in watcher.events] == ["tensor-assert"]


def test_host_tensor_reported_at_its_creation_line_with_where_it_met_the_device():
    x = torch.randn(4, 3)
    with SyncWatcher(on_accelerator=False) as watcher:
        scale = torch.tensor([1.0, 2.0, 3.0])  # created here
        doubled = scale * 2  # still on the host
        y = x * doubled  # meets the device here
    assert y.shape == (4, 3)
    (event,) = watcher.events
    assert event.kind == "tensor-from-python-data"
    assert event.line == lineno_of("# created here")
    assert event.used_at == f"{HERE}:{lineno_of('# meets the device here')}"
    assert event.fingerprint


def test_a_sync_on_a_host_tensor_that_meets_the_device_is_found():
    # nlp-tutorial's attention: scores filled into a host tensor, read with .data.numpy() every
    # step, then multiplied with the encoder's (device) outputs. Made on the device, as its own
    # finding says to, the read is a sync; it went unreported.
    encoded = torch.randn(5, 8)
    with SyncWatcher(on_accelerator=False) as watcher:
        scores = torch.zeros(5)  # made on the host
        for i in range(5):
            scores[i] = encoded[i].sum()
        weights = torch.softmax(scores, 0)
        kept = weights.data.numpy()  # read on the host
        context = weights @ encoded
    assert kept.shape == (5,) and context.shape == (8,)
    lines = {(e.kind, e.line) for e in watcher.events}
    assert ("to-host", lineno_of("# read on the host")) in lines, lines
    assert ("host-tensor-to-device", lineno_of("# made on the host")) in lines, lines


def test_a_sync_on_a_host_tensor_moved_later_stays_host_work():
    with SyncWatcher(on_accelerator=False) as watcher:
        counts = torch.zeros(4)
        top = counts.max().item()  # before the move: host work
        counts.to(CPU)
    assert top == 0.0
    assert [e.kind for e in watcher.events] == ["host-tensor-to-device"]


def test_zero_dim_host_tensor_meeting_the_device_is_not_a_copy():
    x = torch.randn(4, 3)
    with SyncWatcher(on_accelerator=False) as watcher:
        y = x * torch.tensor(0.5)
    assert y.shape == (4, 3)
    assert watcher.events == []


def test_fingerprint_tells_constants_from_changing_values():
    with SyncWatcher(on_accelerator=False) as watcher:
        for i in range(2):
            torch.tensor([1.0, 2.0]).to(CPU)
            torch.tensor([float(i), 2.0]).to(CPU)
            watcher.mark_step()
    kinds = {f.line: f.kind for f in watcher.findings()}
    assert kinds == {
        lineno_of("torch.tensor([1.0, 2.0]).to("): "constant-rebuilt",
        lineno_of("torch.tensor([float(i), 2.0])"): "tensor-from-python-data",
    }


def test_cuda_synchronize_is_recorded_and_restored():
    original = torch.cuda.synchronize
    with SyncWatcher(on_accelerator=False) as watcher:
        assert torch.cuda.synchronize is not original
        try:
            torch.cuda.synchronize()  # raises without CUDA; still a sync site
        except (AssertionError, RuntimeError):
            pass
    assert torch.cuda.synchronize is original
    assert [(e.kind, e.line) for e in watcher.events] == [
        ("cuda-synchronize", lineno_of("torch.cuda.synchronize()  # raises"))
    ]


def test_torch_internal_syncs_are_not_the_users():
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    x = torch.ones(1, 4)
    with SyncWatcher(on_accelerator=False) as watcher:
        for _ in range(2):
            model(x).sum().backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            watcher.mark_step()
    assert watcher.events == []


def test_a_librarys_sync_points_at_the_users_call_with_via(tmp_path, monkeypatch):
    lib_dir = tmp_path / "site-packages"
    lib_dir.mkdir()
    (lib_dir / "fake_metrics_lib.py").write_text(
        textwrap.dedent(
            """
            def log_metric(value):
                return value.item()
            """
        )
    )
    monkeypatch.syspath_prepend(str(lib_dir))
    import fake_metrics_lib

    w = torch.ones(2, requires_grad=True)
    try:
        with SyncWatcher(on_accelerator=False) as watcher:
            fake_metrics_lib.log_metric(w.sum())  # the user's call into the library
    finally:
        sys.modules.pop("fake_metrics_lib", None)
    (event,) = watcher.events
    assert event.line == lineno_of("# the user's call into the library")
    assert event.via == f"{lib_dir / 'fake_metrics_lib.py'}:3"


# -- the user-frame rule -----------------------------------------------------------------------


def test_user_file_rule():
    import json

    assert is_user_file(__file__)
    assert is_user_file("/home/me/project/train.py")
    assert is_user_file("<stdin>") and is_user_file("<ipython-input-3-abc>")
    assert not is_user_file("<frozen importlib._bootstrap>")
    assert not is_user_file(torch.__file__)
    assert not is_user_file(torch.nn.modules.module.__file__)
    assert not is_user_file(json.__file__)
    assert not is_user_file(os.__file__)
    assert not is_user_file("/opt/venv/lib/python3.11/site-packages/lightning/trainer.py")
    assert not is_user_file("/usr/lib/python3/dist-packages/transformers/trainer.py")
    assert not is_user_file(torchdoctor.__file__)
    scenarios = Path(torchdoctor.__file__).parent / "cli" / "demo" / "scenarios" / "demo_train.py"
    assert is_user_file(str(scenarios))  # the demo's scripts play the user
    assert file_kind(torch.__file__) == "torch"


def test_user_site_is_this_line():
    site = user_site()  # this line
    assert site is not None
    assert (site.file, site.line) == (str(HERE), lineno_of("user_site()  # this line"))
    assert site.source == "site = user_site()  # this line"


# -- public helpers ----------------------------------------------------------------------------


def seed004_weighted_nll(pred, target, weight):
    assert target.max() < 10
    nll = -pred[range(target.shape[0]), target]
    nll = nll * weight[target]
    return (nll / weight[target].sum()).sum()


def seed004_loss(logits, target):
    pred = logits.log_softmax(-1)
    return seed004_weighted_nll(pred, target, torch.Tensor([0.1] * 10).to(logits.device))


def test_find_syncs_on_the_seed_loss():
    logits = torch.randn(8, 10, requires_grad=True)
    target = torch.randint(0, 10, (8,))
    findings = find_syncs(seed004_loss, logits, target)
    assert {(f.kind, f.line) for f in findings} == {
        ("tensor-assert", lineno_of("    assert target.max() < 10")),
        ("python-index", lineno_of("nll = -pred[range(")),
        ("tensor-from-python-data", lineno_of("torch.Tensor([0.1] * 10).to(logits")),
    }
    assert torchdoctor.find_syncs is find_syncs


def test_find_syncs_on_clean_code_finds_nothing():
    criterion = nn.CrossEntropyLoss(weight=torch.full((10,), 0.1))
    logits = torch.randn(8, 10, requires_grad=True)
    target = torch.randint(0, 10, (8,))
    assert find_syncs(lambda: criterion(logits, target).backward()) == []


def test_watch_syncs_fills_findings_on_exit_and_sees_rebuilt_constants():
    logits = torch.randn(8, 10, requires_grad=True)
    target = torch.randint(0, 10, (8,))
    with torchdoctor.watch_syncs() as watch:
        for _ in range(2):
            seed004_loss(logits, target)
            watch.mark_step()
        assert watch.findings == []
    by_kind = {f.kind: f for f in watch.findings}
    assert set(by_kind) == {"tensor-assert", "python-index", "constant-rebuilt"}
    assert all(f.calls_per_step == 1.0 for f in watch.findings)
    assert torchdoctor.watch_syncs is watch_syncs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_stall_is_measured_on_cuda():
    x = torch.randn(2048, 2048, device="cuda")
    with SyncWatcher() as watcher:
        y = x
        for _ in range(20):
            y = y @ x
        y.sum().item()
        torch.tensor([0.1] * 10).cuda()
    findings = {f.kind: f for f in watcher.findings()}
    assert findings["item"].cost_ms is not None and findings["item"].cost_ms > 0
    assert "makes the host wait" in findings["item"].title
    assert "tensor-from-python-data" in findings


class LabelledDataset(torch.utils.data.Dataset):
    """A Dataset doing host work in __getitem__: never a finding, it runs in the loader."""

    def __init__(self):
        self.features = torch.randn(32, 4)
        self.labels = torch.randint(0, 3, (32,))

    def __len__(self):
        return 32

    def __getitem__(self, i):
        label = int(self.labels[i].item())
        return self.features[i], torch.tensor(label)


def test_dataloader_work_in_the_main_process_is_not_reported():
    loader = torch.utils.data.DataLoader(LabelledDataset(), batch_size=8, num_workers=0)
    model = nn.Linear(4, 3)
    with SyncWatcher(on_accelerator=False) as watcher:
        for x, y in loader:
            x, y = x.to(CPU), y.to(CPU)
            nn.functional.cross_entropy(model(x), y).backward()
            watcher.mark_step()
    assert watcher.events == []


def test_sampled_windows_restart_on_a_new_step():
    w = torch.ones(3, requires_grad=True)
    watcher = SyncWatcher(on_accelerator=False)
    for _ in range(2):  # two sampled windows of one unmarked step each
        hook_that_starts(watcher)
        w.sum().item()
        hook_that_stops(watcher)
    assert [e.step for e in watcher.events] == [0, 1]
    assert watcher.steps == 2
    assert watcher.findings()[0].calls_per_step == 1.0


def test_bookkeeping_never_breaks_the_users_call():
    with SyncWatcher(on_accelerator=False):
        with pytest.raises(RuntimeError):
            torch.ones(2).to("no-such-device")  # the user's own error, raised by torch
        q = torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), 0.1, 0, torch.quint8)
    assert q.shape == (2,)


def test_torchdoctors_own_calls_are_never_the_users():
    # Code compiled under torchdoctor's package path plays the runner calling torch from a hook.
    runner_file = str(Path(torchdoctor.__file__).parent / "_pretend_runner.py")
    namespace: dict = {}
    exec(
        compile("def runner_hook(t):\n    return t.sum().item()\n", runner_file, "exec"), namespace
    )
    w = torch.ones(3, requires_grad=True)
    with SyncWatcher(on_accelerator=False) as watcher:
        namespace["runner_hook"](w)  # called from user code, but the .item() is torchdoctor's
        w.sum().item()  # the user's own
    assert [e.line for e in watcher.events] == [lineno_of("w.sum().item()  # the user's own")]


def test_started_and_stopped_in_optimizer_step_hooks_like_the_runner():
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    watcher = SyncWatcher(on_accelerator=False)
    steps_seen = []

    def after_step(optimizer, args, kwargs):
        steps_seen.append(len(steps_seen))
        if len(steps_seen) == 1:
            watcher.start()  # sampled steps begin after step 0
        elif len(steps_seen) <= 3:
            watcher.mark_step()
            if len(steps_seen) == 3:
                watcher.stop()

    handle = opt.register_step_post_hook(after_step)
    try:
        for _ in range(5):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"loss {loss:.3f}")  # a sync in every step; only 2 are watched
    finally:
        handle.remove()
        watcher.stop()
    (finding,) = watcher.findings()
    assert finding.kind == "print-tensor" and finding.calls_per_step == 1.0
    assert watcher.steps == 2
    assert len(_get_current_function_mode_stack()) == 0


def test_find_syncs_applies_the_cpu_rule_to_cpu_inputs_even_with_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine
    module = nn.Linear(4, 3)
    findings = find_syncs(lambda: module(torch.randn(2, 4).detach()).sum().item())
    assert sorted(f.kind for f in findings) == ["host-tensor-to-device", "item"]
    assert all("on an accelerator" in f.title for f in findings)


def _act(policy_out: torch.Tensor) -> int:
    return policy_out.argmax().item()


def _env_step(action: int) -> int:
    return action + 1


def test_a_read_value_is_followed_to_the_call_it_is_handed_to():
    # pytorch/examples' reinforce: select_action returns action.item(), the loop hands it to
    # env.step on the next line; a value only printed or kept is no such use
    logits = torch.randn(4)
    with SyncWatcher(on_accelerator=False) as watcher:
        action = _act(logits)
        _env_step(action)
        _env_step(logits.argmax().item())
        kept = logits.sum().item()
        print(kept)
    used = {e.line: e.used_by for e in watcher.events}
    assert used[lineno_of("return policy_out.argmax().item()")] == "_env_step"
    assert used[lineno_of("_env_step(logits.argmax().item())")] == "_env_step"
    assert used[lineno_of("kept = logits.sum().item()")] is None
