"""EMA: the warm-up formula worked by hand, buffers, wrapped models, saving, device and errors."""

from __future__ import annotations

import io
import math
import socket

import pytest
import torch
import torch.distributed as dist
from torch import nn

import torchdoctor
from torchdoctor import EMA

#: Seconds each: left out of `make test-fast`.
pytestmark = pytest.mark.slow


class Net(nn.Module):
    """A linear layer and a BatchNorm: float parameters, float buffers and an int64 buffer."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(3, width)
        self.bn = nn.BatchNorm1d(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


def float64_net() -> Net:
    torch.manual_seed(0)
    return Net().double()


def perturb(model: nn.Module, step: int) -> None:
    """Give every float tensor new values, as a training step would, and bump the counter."""
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            if t.is_floating_point():
                t.copy_(torch.randn_like(t) + step)
            else:
                t.add_(7)


def floats(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if v.is_floating_point()}


# --- numerics ---------------------------------------------------------------------------


@pytest.mark.parametrize("warmup_steps", [0, 3])
def test_updates_follow_the_formula_worked_by_hand(warmup_steps):
    model = float64_net()
    ema = EMA(model, decay=0.9, warmup_steps=warmup_steps)
    expected = floats(model)
    for step in range(1, 5):
        perturb(model, step)
        ema.update(model)
        # d by hand: 0.9 * (1 - e^(-step / 3)) while warming up, 0.9 throughout without warm-up
        d = 0.9 if warmup_steps == 0 else 0.9 * (1 - math.exp(-step / 3))
        assert ema.updates == step
        assert ema.effective_decay == pytest.approx(d, rel=1e-12)
        live = floats(model)
        for name in expected:
            expected[name] = d * expected[name] + (1 - d) * live[name]
        got = floats(ema.module)
        for name, value in expected.items():
            torch.testing.assert_close(got[name], value, rtol=1e-12, atol=1e-12, msg=name)


def test_warm_up_decay_values():
    ema = EMA(nn.Linear(2, 2), decay=0.9999, warmup_steps=2000)
    assert ema.effective_decay == 0.0  # nothing averaged yet
    assert ema.decay_after(1) == pytest.approx(0.9999 * (1 - math.exp(-1 / 2000)))
    assert ema.decay_after(2000) == pytest.approx(0.9999 * (1 - math.exp(-1)))
    assert ema.decay_after(10**6) == pytest.approx(0.9999)
    assert EMA(nn.Linear(2, 2), decay=0.5, warmup_steps=0).decay_after(1) == 0.5


def test_first_update_with_warm_up_nearly_copies_the_live_weights():
    model = float64_net()
    ema = EMA(model, decay=0.9999, warmup_steps=2000)
    perturb(model, 1)
    ema.update(model)
    for name, value in floats(ema.module).items():
        torch.testing.assert_close(value, floats(model)[name], rtol=1e-3, atol=1e-3)


def test_float32_model_agrees_with_float64_formula():
    torch.manual_seed(0)
    model = Net()
    ema = EMA(model, decay=0.99, warmup_steps=0)
    expected = {k: v.double() for k, v in floats(model).items()}
    for step in range(1, 4):
        perturb(model, step)
        ema.update(model)
        for name, value in floats(model).items():
            expected[name] = 0.99 * expected[name] + 0.01 * value.double()
    for name, value in floats(ema.module).items():
        torch.testing.assert_close(value.double(), expected[name], rtol=1e-5, atol=1e-6)


def test_non_floating_buffers_are_copied_not_averaged():
    model = float64_net()
    ema = EMA(model, decay=0.9, warmup_steps=0)
    model.train()
    for _ in range(3):
        model(torch.randn(8, 3, dtype=torch.float64))
    ema.update(model)
    assert ema.module.bn.num_batches_tracked.item() == 3
    assert ema.module.bn.num_batches_tracked.dtype == torch.int64
    # the running statistics are floating buffers: averaged, so between old and new
    old = torch.zeros(4, dtype=torch.float64)
    torch.testing.assert_close(ema.module.bn.running_mean, 0.9 * old + 0.1 * model.bn.running_mean)


def test_averaged_copy_is_frozen_in_eval_mode_and_separate():
    model = Net()
    ema = EMA(model)
    assert ema.module is not model and not ema.module.training
    assert all(not p.requires_grad for p in ema.module.parameters())
    assert all(p.requires_grad for p in model.parameters())  # the live model is untouched
    assert model.training
    assert ema.module.fc.weight.data_ptr() != model.fc.weight.data_ptr()


def test_update_runs_without_autograd_even_on_a_copy_made_trainable():
    # Without no_grad, an in-place update of a leaf that requires grad raises in autograd.
    model = Net()
    ema = EMA(model, decay=0.5, warmup_steps=0)
    ema.module.requires_grad_(True)
    ema.update(model)
    assert ema.module.fc.weight.grad_fn is None


# --- wrapped models ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gloo_group():
    """A real one-process gloo group, torn down after the test."""
    assert not dist.is_initialized()
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def _check_unwrapped(ema: EMA, plain: nn.Module, wrapped: nn.Module) -> None:
    assert type(ema.module) is Net
    assert set(ema.module.state_dict()) == set(plain.state_dict())  # no "module." prefix
    perturb(plain, 1)
    ema.update(wrapped)
    for name, value in floats(ema.module).items():
        torch.testing.assert_close(value, floats(plain)[name])


def test_unwraps_distributed_data_parallel(gloo_group):
    plain = Net().double()
    wrapped = nn.parallel.DistributedDataParallel(plain)
    ema = EMA(wrapped, decay=0.0, warmup_steps=0)  # decay 0: the average is the live model
    _check_unwrapped(ema, plain, wrapped)


def test_unwraps_data_parallel_on_cpu():
    plain = Net().double()
    wrapped = nn.DataParallel(plain)
    ema = EMA(wrapped, decay=0.0, warmup_steps=0)
    _check_unwrapped(ema, plain, wrapped)


def test_unwraps_compiled_module_without_compiling():
    # torch.compile is lazy: wrapping compiles nothing until the first forward, which never runs.
    plain = Net().double()
    # torch.compile turns torch.distributions' argument checks off process-wide: the test's
    # own call, put back so the hygiene fixture sees torch as it was.
    checks = torch.distributions.Distribution._validate_args
    try:
        wrapped = torch.compile(plain)
    finally:
        torch.distributions.Distribution.set_default_validate_args(checks)
    ema = EMA(wrapped, decay=0.0, warmup_steps=0)
    _check_unwrapped(ema, plain, wrapped)


def test_plain_model_at_construction_wrapped_at_update():
    plain = Net().double()
    ema = EMA(plain, decay=0.0, warmup_steps=0)
    _check_unwrapped(ema, plain, nn.DataParallel(plain))


# --- saving -----------------------------------------------------------------------------


def test_state_dict_round_trip_through_torch_save():
    model = float64_net()
    ema = EMA(model, decay=0.8, warmup_steps=5)
    for step in range(1, 4):
        perturb(model, step)
        ema.update(model)
    buffer = io.BytesIO()
    torch.save(ema.state_dict(), buffer)
    buffer.seek(0)
    restored = EMA(float64_net(), decay=0.5, warmup_steps=0)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert (restored.updates, restored.decay, restored.warmup_steps) == (3, 0.8, 5)
    for name, value in ema.module.state_dict().items():
        assert torch.equal(restored.module.state_dict()[name], value), name
    # and it carries on from where the saved one was
    perturb(model, 4)
    ema.update(model)
    restored.update(model)
    assert restored.effective_decay == ema.effective_decay
    for name, value in ema.module.state_dict().items():
        assert torch.equal(restored.module.state_dict()[name], value), name


def test_load_refuses_other_dicts():
    ema = EMA(Net())
    with pytest.raises(ValueError, match="not an EMA state dict"):
        ema.load_state_dict(Net().state_dict())
    state = ema.state_dict()
    with pytest.raises(ValueError, match="version"):
        ema.load_state_dict({**state, "version": 99})
    with pytest.raises(ValueError, match="decay"):
        ema.load_state_dict({**state, "decay": 1.5})
    with pytest.raises(RuntimeError, match="size mismatch"):
        ema.load_state_dict({**state, "module": Net(width=5).state_dict()})
    assert ema.updates == 0 and ema.decay == 0.9999  # a refused load changes nothing


# --- device -----------------------------------------------------------------------------


def test_device_keeps_the_average_there():
    model = Net().double()
    ema = EMA(model, decay=0.0, warmup_steps=0, device="cpu")
    assert ema.device == torch.device("cpu")
    assert all(t.device.type == "cpu" for t in ema.module.state_dict().values())
    perturb(model, 1)
    ema.update(model)
    torch.testing.assert_close(ema.module.fc.weight, model.fc.weight.detach())
    assert "device='cpu'" in repr(ema)


def test_device_other_than_the_models_gets_the_copy_and_each_update():
    # The meta device stands in for a second device on a CPU-only machine: tensors there have
    # shapes and dtypes but no data, so this checks where things live, not the values.
    model = Net()
    ema = EMA(model, device="meta")
    assert {t.device.type for t in ema.module.state_dict().values()} == {"meta"}
    assert model.fc.weight.device.type == "cpu"  # the live model stays where it was
    ema.update(model)
    assert ema.updates == 1
    assert {t.device.type for t in ema.module.state_dict().values()} == {"meta"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_average_on_cpu_of_a_cuda_model():
    model = Net().double().cuda()
    ema = EMA(model, decay=0.5, warmup_steps=0, device="cpu")
    before = ema.module.fc.weight.clone()
    perturb(model, 1)
    ema.update(model)
    assert ema.module.fc.weight.device.type == "cpu"
    torch.testing.assert_close(ema.module.fc.weight, 0.5 * before + 0.5 * model.fc.weight.cpu())


def test_model_cast_after_construction_is_cast_back():
    model = Net().double()
    ema = EMA(model, decay=0.0, warmup_steps=0)
    model.float()
    perturb(model, 1)
    ema.update(model)
    assert ema.module.fc.weight.dtype == torch.float64
    torch.testing.assert_close(ema.module.fc.weight, model.fc.weight.detach().double())


# --- errors -----------------------------------------------------------------------------


def test_structure_mismatch_is_refused_with_the_names():
    ema = EMA(Net())
    with pytest.raises(ValueError, match=r"different structure.*missing fc\.weight.* and 2 more"):
        ema.update(nn.Sequential())  # nothing in common: 7 names, 5 shown
    other = Net()
    other.extra = nn.Linear(1, 1)
    with pytest.raises(ValueError, match=r"unexpected extra\.weight, extra\.bias"):
        ema.update(other)
    with pytest.raises(ValueError, match=r"fc\.weight has shape \(5, 3\), the average \(4, 3\)"):
        ema.update(Net(width=5))
    assert ema.updates == 0  # a refused update counts nothing


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay": 1.0}, r"decay must be in \[0, 1\)"),
        ({"decay": -0.1}, r"decay must be in \[0, 1\)"),
        ({"decay": "0.9"}, "decay must be a number"),
        ({"warmup_steps": -1}, "warmup_steps must be a finite number >= 0"),
        ({"warmup_steps": float("nan")}, "warmup_steps must be a finite number >= 0"),
        ({"warmup_steps": None}, "warmup_steps must be a number"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EMA(nn.Linear(2, 2), **kwargs)


def test_exported_from_the_package_and_repr():
    assert torchdoctor.EMA is torchdoctor.remedies.EMA is EMA
    text = repr(EMA(Net(), decay=0.999, warmup_steps=10))
    assert text == "EMA(Net, decay=0.999, warmup_steps=10, updates=0, effective_decay=0)"
