"""The ``checkpoint`` lever (``capture._checkpoint_lever``): the blocks that saved the most are
checkpointed from its second step, the memory held is counted exactly on both sides (a
checkpointed block's inputs count: checkpoint saves them), the gradients do not change, every
forward is given back, and the code it gives runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from torchdoctor.capture._checkpoint_lever import Checkpoint, blocks
from torchdoctor.capture._memory_split import block_of
from torchdoctor.capture._patch import Patcher

N, D, H = 8, 64, 256


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, D)) for _ in range(2)
        )
        self.head = nn.Linear(D, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _session(model: nn.Module, optimizer: torch.optim.Optimizer) -> SimpleNamespace:
    return SimpleNamespace(
        root_modules=lambda: [model],
        clock=SimpleNamespace(device=None),
        optimizers=SimpleNamespace(known=lambda: [optimizer]),
        state=SimpleNamespace(model_name=lambda: "net"),
    )


def _grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    model(x).pow(2).mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def test_blocks_with_layers_of_their_own_are_checkpointed_and_counted_exactly():
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(N, D)
    plain = _grads(model, x)
    forwards = {id(b): b.forward for b in model.layers}
    lever, patcher = Checkpoint(), Patcher()
    session = _session(model, optimizer)
    assert lever.skip_reason(session) is None
    lever.apply(session, patcher, "")
    try:
        first = _grads(model, x)
        lever.step_ended(session, 1)
        second = _grads(model, x)
        lever.step_ended(session, 2)
        assert lever.chosen == ["layers.0", "layers.1"]
        for a, b, c in zip(plain, first, second):
            assert torch.equal(a, b) and torch.allclose(a, c, rtol=0, atol=1e-7)
    finally:
        patcher.restore()
    assert all(vars(b).get("forward") is None for b in model.layers)  # given back
    assert {id(b): b.forward for b in model.layers} == forwards
    # Without: each block saved its input (for the first Linear's weight) and its ReLU's output
    # (N x H floats, the second Linear's input too: one storage); outside the blocks, the head's
    # input and the loss's own tensor. With: each ReLU's output is recomputed; the blocks'
    # inputs (x and the first block's output) are saved by checkpoint, and still counted.
    detail = lever.detail(session)
    assert detail["activations_before"] - detail["activations_after"] == 2 * 4 * N * H
    assert detail["activations_after"] >= 3 * 4 * N * D  # x, the block between, the head's
    # the backward rebuilds one block at a time: its input and its ReLU's output, on top
    assert detail["held_at_most"] == detail["activations_after"] + 4 * N * D + 4 * N * H
    from torchdoctor.record import Trial
    from torchdoctor.report.trials import memory_line

    line = memory_line(Trial(name="checkpoint", changed="", detail=detail))
    assert "at most during the backward (a block rebuilt at a time)" in line, line
    code = lever.code(session, "")
    assert "for block in net.layers:" in code and "use_reentrant=False" in code


def test_the_code_it_gives_runs_and_keeps_the_gradients():
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(N, D)
    plain = _grads(model, x)
    lever = Checkpoint()
    lever.chosen, lever._blocks = ["layers.0", "layers.1"], blocks(model)
    code = lever.code(_session(model, torch.optim.SGD(model.parameters())), "")
    exec(code, {"net": model})  # noqa: S102 - the code a user pastes
    assert all("forward" in vars(b) for b in model.layers)  # the paste replaced them
    for a, b in zip(plain, _grads(model, x)):
        assert torch.allclose(a, b, rtol=0, atol=1e-7)


def test_blocks_of_one_container_in_part_or_of_the_root_are_named_each():
    lever = Checkpoint()
    model = Net()
    lever._blocks = blocks(model)
    lever.chosen = ["layers.1"]
    session = _session(model, torch.optim.SGD(model.parameters()))
    assert "for block in (net.layers[1],):" in lever.code(session, "")


@pytest.mark.parametrize(
    ("model", "why"),
    [
        (nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)), "no block of the model"),
        (None, "one model the loss is computed from"),
    ],
)
def test_a_model_of_single_layers_or_two_models_is_skipped_with_why(model, why):
    roots = [model] if model is not None else [nn.Linear(2, 2), nn.Linear(2, 2)]
    session = SimpleNamespace(root_modules=lambda: roots)
    assert why in Checkpoint().skip_reason(session)


def test_a_block_with_batch_norm_is_told_its_statistics_update_twice():
    model = nn.Sequential(
        nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8)), nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    )
    session = _session(model, torch.optim.SGD(model.parameters()))
    lever = Checkpoint()
    lever._blocks = blocks(model)
    lever.chosen = ["1"]
    assert "numerics do not change" in lever.caveats(session)[-1]
    lever.chosen = ["0", "1"]
    assert (
        "BatchNorm1d" in lever.caveats(session)[-1] and "second time" in lever.caveats(session)[-1]
    )


class _GPTBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln(x))


class _GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict({"h": nn.ModuleList(_GPTBlock() for _ in range(2))})
        self.head = nn.Linear(D, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.transformer["h"]:
            x = block(x)
        return self.head(x)


def test_a_blocks_own_sequential_stays_in_the_block():
    """A GPT block's `mlp = Sequential(...)` was split off as blocks of its own (the split
    halved each block, and the trial checkpointed `h.0` and `h.0.mlp`, nested)."""
    model = _GPT()
    assert block_of(model, "transformer.h.1.mlp.2")[0] == "transformer.h.1"
    assert set(blocks(model)) == {"transformer.h.0", "transformer.h.1"}
    lever = Checkpoint()
    lever._blocks, lever.chosen = blocks(model), ["transformer.h.0", "transformer.h.1"]
    code = lever.code(_session(model, torch.optim.SGD(model.parameters())), "")
    assert "for block in net.transformer['h']:" in code, code


def test_a_module_dicts_keys_are_strings_in_the_code_and_its_values_are_iterated():
    class Staged(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stages = nn.ModuleDict(
                {"3": nn.Sequential(nn.Linear(D, D), nn.ReLU()), "a-b": nn.Linear(D, D)}
            )

    model = Staged()
    x = torch.randn(N, D)
    lever = Checkpoint()
    lever._blocks = blocks(model)
    assert set(lever._blocks) == {"stages.3"}  # a single layer is no block
    model.stages["b"] = nn.Sequential(nn.Linear(D, D), nn.ReLU())
    lever._blocks = blocks(model)
    session = _session(model, torch.optim.SGD(model.parameters()))
    lever.chosen = ["stages.3"]
    assert "(net.stages['3'],)" in lever.code(session, "")
    exec(lever.code(session, ""), {"net": model})  # noqa: S102 - it raised KeyError: 3
    model.stages["3"](x).sum().backward()
    lever.chosen = ["stages.3", "stages.b"]  # not the Linear beside them
    assert "for block in (net.stages['3'], net.stages['b']):" in lever.code(session, "")
    del model.stages["a-b"]
    assert "for block in net.stages.values():" in lever.code(session, "")


def test_a_recurrent_layer_is_a_block_of_its_own():
    class Language(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn, self.out = nn.LSTM(D, D, 2), nn.Linear(D, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.rnn(x)[0])

    model = Language()
    assert list(blocks(model)) == ["rnn"]
    assert Checkpoint().skip_reason(SimpleNamespace(root_modules=lambda: [model])) is None


def test_a_compiled_models_blocks_are_named_as_the_model_it_wraps():
    """A torch.compile'd model's blocks were labelled `_orig_mod.0`. (Its wrapper, as
    torch.compile builds it: the model as the submodule `_orig_mod`; compiling here would
    import dynamo, which changes torch for the tests after.)"""

    class Compiled(nn.Module):
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self._orig_mod = model

    model = Compiled(Net())
    assert block_of(model, "_orig_mod.layers.1.0")[0] == "layers.1"
    assert block_of(model, "")[0] == "Net"
    lever = Checkpoint()
    lever._blocks, lever.chosen = blocks(model), ["layers.0", "layers.1"]
    code = lever.code(_session(model, torch.optim.SGD(model.parameters())), "")
    assert "for block in net._orig_mod.layers:" in code, code


def test_a_sequential_standing_for_its_layers_never_nests_its_own_blocks():
    """SqueezeNet's shape: `features` holds single layers and Fire modules; `features` stood
    for its layers beside `features.3` (a Fire), so checkpoints nested. A DenseNet's named
    Sequential gave `net.features[denseblock1]` (a NameError)."""
    from collections import OrderedDict

    class Fire(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.squeeze, self.expand = nn.Linear(D, 8), nn.Linear(8, D)

    class Squeeze(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                OrderedDict(
                    [("conv0", nn.Linear(D, D)), ("relu0", nn.ReLU()), ("fire1", Fire()),
                     ("fire2", Fire())]
                )
            )  # fmt: skip

    model = Squeeze()
    assert set(blocks(model)) == {"features.fire1", "features.fire2"}
    lever = Checkpoint()
    lever._blocks, lever.chosen = blocks(model), ["features.fire1"]
    code = lever.code(_session(model, torch.optim.SGD(model.parameters())), "")
    assert "(net.features.fire1,)" in code, code
