"""Variables that keep every step's autograd graph (``capture._kept_graphs``): a loss summed as a
tensor, a list of losses, found at the line that keeps them; a clean loop gives nothing."""

from __future__ import annotations

import torch
from torch import nn

from torchdoctor.capture._kept_graphs import KeptGraphs

HERE = __file__


def lineno_in(path: str, text: str) -> int:
    with open(path) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)


def _train(steps: int, kept: KeptGraphs, keep: str) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total_loss = 0.0
    losses = []
    outputs = []
    features = []
    ema = None
    for _ in range(steps):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.look()  # where torchdoctor looks: the step's end
        if keep == "sum":
            total_loss += loss  # keeps the graph
        elif keep == "list":
            losses.append(loss)  # keeps each graph
        elif keep == "features":
            features.append(torch.zeros(512, 1024))  # 2 MB of features a step
        elif keep == "outputs":
            outputs.append(model(torch.randn(8, 4)))  # an output kept for an epoch's metric
        elif keep == "ema":
            ema = loss if ema is None else 0.9 * ema + 0.1 * loss  # a moving average
        else:
            total_loss += loss.item()
            losses.append(loss.detach())


def test_a_loss_summed_as_a_tensor_is_found_at_its_line():
    kept = KeptGraphs()
    _train(3, kept, "sum")
    (found,) = kept.findings()
    assert found.kind == "loop.graph-kept" and found.detail == {
        "variable": "total_loss",
        "how": "sum",
    }
    assert (found.file, found.line) == (HERE, lineno_in(HERE, "total_loss += loss  # keeps"))
    assert "total_loss += loss.item()" in found.fix


def test_a_list_of_losses_with_their_graphs_is_found():
    kept = KeptGraphs()
    _train(3, kept, "list")
    (found,) = kept.findings()
    assert found.detail["variable"] == "losses" and found.detail["how"] == "list"
    assert found.detail["device"] == "cpu" and found.detail["mb_per_step"] == 0.0  # a scalar
    assert found.line == lineno_in(HERE, "losses.append(loss)  # keeps")
    assert found.fix.startswith("losses.append(loss.detach())")


def test_an_output_kept_in_a_list_is_told_to_detach_that_value():
    kept = KeptGraphs()
    _train(3, kept, "outputs")
    (found,) = kept.findings()
    assert found.line == lineno_in(HERE, "# an output kept")
    assert found.fix.startswith("outputs.append(model(torch.randn(8, 4)).detach())"), found.fix


def test_a_list_that_keeps_megabytes_of_tensors_a_step_is_memory_creeping():
    kept = KeptGraphs()
    _train(3, kept, "features")
    (found,) = kept.findings()
    assert found.kind == "loop.memory-creep" and found.line == lineno_in(HERE, "# 2 MB of")
    assert found.detail["mb_per_step"] == 2.0 and found.detail["device"] == "cpu"
    assert "running sum" in found.fix and ".cpu()" not in found.fix  # on the CPU already


def test_values_read_as_numbers_or_detached_keep_nothing():
    kept = KeptGraphs()
    _train(3, kept, "clean")
    assert kept.findings() == [] and kept.looks == 3


def test_a_moving_average_is_told_to_detach_not_to_become_a_sum():
    kept = KeptGraphs()
    _train(4, kept, "ema")
    (found,) = kept.findings()
    assert found.detail == {"variable": "ema", "how": "sum"}
    assert found.line == lineno_in(HERE, "# a moving average")
    assert found.fix.endswith("ema = ema.detach()  # the value, not the graph it was computed with")
    assert "+=" not in found.fix


def _shapes(steps: int, kept: KeptGraphs, keep: str) -> None:
    """Loops of the shapes users write that the first version missed or misread."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history: dict[str, list] = {"train_loss": [], "lr": []}
    replay = []
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.look()
        if keep == "history":
            history["train_loss"].append(loss)  # a dict of lists
        elif keep == "replay":
            replay.append(torch.zeros(512, 1024))  # 2 MB a step, in a buffer of 2
            if len(replay) > 2:
                replay.pop(0)
        elif keep == "plus":
            losses += [loss]  # a list added to


def test_a_dict_of_lists_keeping_graphs_is_found_at_its_item():
    kept = KeptGraphs()
    _shapes(3, kept, "history")
    (found,) = kept.findings()
    assert found.detail["variable"] == "history['train_loss']"
    assert found.line == lineno_in(HERE, "# a dict of lists")
    assert found.fix.startswith("history['train_loss'].append(loss.detach())"), found.fix


def test_a_buffer_the_loop_trims_is_no_creep():
    """`replay.pop(0)` once it holds 200: a critical creep, running out in 55 s, was told."""
    kept = KeptGraphs()
    _shapes(4, kept, "replay")
    assert kept.findings() == []


def test_a_list_added_to_is_found_at_its_statement_not_the_callers():
    kept = KeptGraphs()
    _shapes(3, kept, "plus")
    (found,) = kept.findings()
    assert found.line == lineno_in(HERE, "losses += [loss]  # a list added to")
