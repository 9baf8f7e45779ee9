"""The trials' levers written into the code (amp, channels-last, compile): where each lands, that
the patched script runs, that the diffs apply, and what is left out with the reason."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import pytest
import torch

from diffs import assert_applies
from torchdoctor.patch import Project, plan, plan_lever
from torchdoctor.record import JudgedSpeedup, RunRecord, Trial

#: Seconds each: left out of `make test-fast`.
pytestmark = pytest.mark.slow

TRAIN = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.conv(x).mean((2, 3)))


def train(model, batches, optimizer):
    for x, y in batches:
        optimizer.zero_grad()
        # the forward, then the loss
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
    return loss.item()


def main():
    torch.manual_seed(0)
    model = Net()
    model = model.to("cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,)))] * 3
    print(train(model, batches, optimizer))


main()
"""


def _setup(tmp_path: Path, text: str = TRAIN) -> tuple[Project, Path]:
    script = tmp_path / "train.py"
    script.write_text(text)
    return Project(script, root=tmp_path), script


def _detail(script: Path, needle: str, **more) -> dict:
    line = next(i + 1 for i, t in enumerate(script.read_text().splitlines()) if needle in t)
    return {
        "model_at": f"{script}:{line}",
        "model": "model",
        "device_type": "cpu",
        "dtype": "bfloat16",
        "inputs": [0],
        **more,
    }


def _run_patched(tmp_path: Path, text: str) -> str:
    """Run the patched script as ``python patched.py`` would, as ``__main__`` with fresh globals,
    and return what it printed. In this process: a new Python for each script took 2.5-8 s of
    the 3 ms scripts here (torch's import); torch's random state is put back after."""
    patched = tmp_path / "patched.py"
    patched.write_text(text)
    printed = io.StringIO()
    with torch.random.fork_rng(), contextlib.redirect_stdout(printed):
        try:
            runpy.run_path(str(patched), run_name="__main__")
        except Exception as error:  # the script's own failure, shown with the text that raised
            pytest.fail(f"the patched script raised {error!r}:\n{text}")
    return printed.getvalue()


def test_amp_wraps_the_forward_and_loss_up_to_backward_with_its_caveat(tmp_path):
    project, script = _setup(tmp_path)
    remedy = plan_lever(project, "amp", _detail(script, "out = model(x)"), "trial")
    assert not remedy.skipped, remedy.skipped
    assert [(c.line, c.what) for c in remedy.changes] == [
        (19, "lines 19–20 (from the model's call to the backward) under "
             'torch.autocast(device_type="cpu", dtype=torch.bfloat16)'),
    ]  # fmt: skip
    assert "numerics" in remedy.caveat
    text = project.rendered({"amp"})[script.resolve()]
    assert (
        "        optimizer.zero_grad()\n"
        "        # the forward, then the loss\n"
        "        # torchdoctor fix: bf16 autocast changes the numerics: check the loss curve\n"
        '        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):\n'
        "            out = model(x)\n"
        "            loss = nn.functional.cross_entropy(out, y)\n"
        "        loss.backward()\n"
    ) in text
    assert_applies(project, project.diff({"amp"}), remedies=("amp",))
    # rendered twice (each variant renders): the same text
    assert project.rendered({"amp"})[script.resolve()] == text


def test_amp_is_left_out_when_forward_and_backward_are_one_statement_or_fp16(tmp_path):
    project, script = _setup(
        tmp_path,
        TRAIN.replace(
            "        out = model(x)\n        loss = nn.functional.cross_entropy(out, y)\n"
            "        loss.backward()\n",
            "        nn.functional.cross_entropy(model(x), y).backward()\n",
        ),
    )
    one = plan_lever(project, "amp", _detail(script, "model(x), y).backward()"), "trial")
    assert not one.changes and "one statement" in one.skipped[0].reason
    fp16 = plan_lever(project, "amp", _detail(script, "model(x)", dtype="float16"), "trial")
    assert not fp16.changes and "GradScaler" in fp16.skipped[0].reason


def test_channels_last_converts_the_model_where_it_is_built_and_its_4d_input(tmp_path):
    project, script = _setup(tmp_path)
    remedy = plan_lever(project, "channels-last", _detail(script, "out = model(x)"), "trial")
    assert [(c.line, c.what) for c in remedy.changes] == [
        (29, "model = model.to(memory_format=torch.channels_last) added after line 29"),
        (19, "x → x.contiguous(memory_format=torch.channels_last)"),
    ]  # train(model, ...) is called from main() as train(model, ...): built there, line 29
    text = project.rendered({"channels-last"})[script.resolve()]
    assert (
        '    model = model.to("cpu")\n'
        "    model = model.to(memory_format=torch.channels_last)\n"
        "    optimizer = torch.optim.SGD("
    ) in text
    assert "        out = model(x.contiguous(memory_format=torch.channels_last))\n" in text
    assert_applies(project, project.diff({"channels-last"}), remedies=("channels-last",))


def test_compile_is_added_after_the_models_last_assignment(tmp_path):
    project, script = _setup(tmp_path)
    remedy = plan_lever(project, "compile", _detail(script, "out = model(x)"), "trial")
    assert [(c.line, c.what) for c in remedy.changes] == [
        (29, "model.compile() added after line 29")
    ]
    text = project.rendered({"compile"})[script.resolve()]
    assert (
        '    model = model.to("cpu")\n'
        "    model.compile()  # torchdoctor fix: compiled in place, state_dict keys unchanged\n"
        "    optimizer = torch.optim.SGD("
    ) in text
    assert_applies(project, project.diff({"compile"}), remedies=("compile",))


def test_the_levers_together_make_a_script_that_runs(tmp_path):
    project, script = _setup(tmp_path)
    detail = _detail(script, "out = model(x)")
    for name in ("amp", "channels-last"):
        assert plan_lever(project, name, detail, "trial").changes
    text = project.rendered({"amp", "channels-last"})[script.resolve()]
    assert "out = model(x.contiguous(memory_format=torch.channels_last))" in text
    float(_run_patched(tmp_path, text))  # it trained and printed its last loss


TRAINER = """\
import torch


class Trainer:
    def __init__(self, model):
        self.model = model

    def step(self, x, y):
        out = self.model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
"""


@pytest.mark.parametrize(
    ("model", "text", "needle", "reason"),
    [
        ("self.model", TRAINER, "self.model(x)", "the model is self.model, not a variable"),
        ("", TRAINER, "self.model(x)", "the run did not see the model's name"),
        (
            "model",
            TRAIN.replace("    print(train(model, batches, optimizer))\n",
                          "    print(train(model, batches, optimizer))\n"
                          "    print(train(Net(), batches, optimizer))\n"),
            "out = model(x)",
            "train() is called with other models than one variable as model",
        ),
        (
            "model",
            "import torch\n\n\ndef step(model, x):\n    return model(x)\n",
            "return model(x)",
            "model is a parameter of step(), which train.py does not call",
        ),
    ],
)  # fmt: skip
def test_a_model_the_patcher_cannot_follow_is_left_out_with_why(
    tmp_path, model, text, needle, reason
):
    project, script = _setup(tmp_path, text)
    for name in ("channels-last", "compile"):
        remedy = plan_lever(project, name, _detail(script, needle, model=model), "t")
        assert not remedy.changes
        assert remedy.skipped[0].reason.startswith(reason), remedy.skipped


def test_a_file_without_import_torch_or_an_unseen_call_is_left_out(tmp_path):
    project, _ = _setup(tmp_path)
    missing = plan_lever(project, "amp", {"model": "model"}, "trial")
    assert "did not see where the model is called" in missing.skipped[0].reason
    other = tmp_path / "loop.py"
    other.write_text("def step(model, x):\n    return model(x)\n")
    remedy = plan_lever(project, "amp", _detail(other, "model(x)"), "trial")
    assert "does not `import torch`" in remedy.skipped[0].reason


def test_only_trials_measured_faster_are_planned(tmp_path):
    project, script = _setup(tmp_path)
    detail = _detail(script, "out = model(x)")
    record = RunRecord()
    record.trials = [
        Trial("amp", "autocast", judged=JudgedSpeedup(1.4), detail=detail),
        Trial("channels-last", "cl", judged=JudgedSpeedup(0.9), detail=detail),
        Trial("compile", "compile", status="failed", judged=JudgedSpeedup(2.0), detail=detail),
        Trial("batch-size", "bs", judged=JudgedSpeedup(3.0), detail=detail),
    ]
    remedies = plan(record, project, [])
    assert [r.key for r in remedies] == ["amp"]
    assert remedies[0].because == "--try amp measured 1.40x in the script's own loop"


ITEM = """\
import torch
from torch import nn

model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    # scale the loss before .backward() is called
    print(f"step {step} loss {loss.item()}")
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_autocast_and_the_item_rewrite_on_the_same_statements_compose(tmp_path):
    """Seen in a new user's try: both edits on the logging line made the print twice, one of
    them before `loss` existed (NameError), and the patch was written."""
    from torchdoctor.patch import plan_syncs
    from torchdoctor.record import Finding

    project, script = _setup(tmp_path, ITEM)
    amp = plan_lever(project, "amp", _detail(script, "out = model(x)"), "trial")
    (item,) = plan_syncs(project, [Finding("item", "t", "f", file=str(script), line=11)])
    assert amp.changes and item.changes
    text = project.rendered({"amp", item.key})[script.resolve()]
    assert text.count("print(") == 1, text
    assert (
        '    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):\n'
        "        out = model(x)\n"
        "        loss = nn.functional.cross_entropy(out, y)\n"
        "        # scale the loss before .backward() is called\n"
        "        if step % 10 == 0:\n"
        '            print(f"step {step} loss {loss.item()}")\n'
        "        opt.zero_grad()\n"
        "    loss.backward()\n"
    ) in text  # a comment that names .backward() does not end the block
    _run_patched(tmp_path, text)
    assert_applies(project, project.diff({"amp", item.key}), remedies=("amp", item.key))


BUILT = """\
import sys
import torch
from torch import nn


def train(net, steps):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(steps):
        out = net(*[torch.randn(2, 3, 8, 8)])
        out.mean().backward()
        opt.step()


def main():
    name = "conv"
    if len(sys.argv) > 5: model = nn.Conv2d(3, 4, 3)
    if name == "conv":
        model = nn.Conv2d(3, 4, 3)
    else:
        model = nn.Conv2d(3, 4, 1)
    train(model, 2)
    model = torch.load("after-training.pt") if len(sys.argv) > 5 else model


main()
"""


def test_the_model_is_followed_through_a_call_to_the_block_that_builds_it(tmp_path):
    """A parameter of the training function, built in an if/else of its caller, one-line `if`
    and a reload after training beside it (each once sent the line to the wrong place or
    raised StopIteration)."""
    project, script = _setup(tmp_path, BUILT)
    detail = _detail(script, "out = net(", model="net")
    compile_ = plan_lever(project, "compile", detail, "trial")
    assert [c.what for c in compile_.changes] == ["model.compile() added after line 20"]
    channels = plan_lever(project, "channels-last", detail, "trial")
    assert [c.what for c in channels.changes] == [
        "model = model.to(memory_format=torch.channels_last) added after line 20"
    ]
    # *args before the 4-D input: its position is not the call's
    assert "not a plain positional argument" in channels.skipped[0].reason
    text = project.rendered({"compile", "channels-last"})[script.resolve()]
    assert (
        "        model = nn.Conv2d(3, 4, 1)\n"
        "    model.compile()  # torchdoctor fix: compiled in place, state_dict keys unchanged\n"
        "    model = model.to(memory_format=torch.channels_last)\n"
        "    train(model, 2)\n"
    ) in text or (
        "        model = nn.Conv2d(3, 4, 1)\n"
        "    model = model.to(memory_format=torch.channels_last)\n"
        "    model.compile()  # torchdoctor fix: compiled in place, state_dict keys unchanged\n"
        "    train(model, 2)\n"
    ) in text
    assert_applies(
        project, project.diff({"compile", "channels-last"}), remedies=("compile", "channels-last")
    )


def test_the_name_called_at_the_line_wins_over_another_name_of_the_same_model(tmp_path):
    project, script = _setup(
        tmp_path, TRAIN.replace("    model = Net()\n", "    net = Net()\n    model = net\n")
    )
    remedy = plan_lever(project, "compile", _detail(script, "out = model(x)", model="net"), "t")
    assert [c.what for c in remedy.changes] == ["model.compile() added after line 30"]


def test_import_torch_nn_binds_torch(tmp_path):
    project, script = _setup(tmp_path, TRAIN.replace("import torch\n", "import torch.nn\n", 1))
    assert plan_lever(project, "amp", _detail(script, "out = model(x)"), "trial").changes


NET = "import torch\nfrom torch import nn\n\n\ndef Net():\n    return nn.Conv2d(3, 4, 3)\n\n\n"


@pytest.mark.parametrize(
    ("body", "needle", "recorded", "after"),
    [
        (  # a tuple assignment, after a constant placeholder
            "def build(kind):\n    return Net(), None\n\n\ndef main():\n    model = 'cnn'\n"
            "    model, opt = build(model)\n    out = model(torch.randn(1, 3, 8, 8))\n\n\nmain()\n",
            "out = model(", "model", "    model, opt = build(model)\n",
        ),
        (  # a global placeholder, built in main() under `global`
            "model = None\n\n\ndef step():\n    return model(torch.randn(1, 3, 8, 8))\n\n\n"
            "def main():\n    global model\n    model = Net()\n    step()\n\n\nmain()\n",
            "return model(", "model", "    model = Net()\n",
        ),
        (  # a closure over main()'s local
            "def main():\n    def step():\n        return model(torch.randn(1, 3, 8, 8))\n\n"
            "    model = Net()\n    step()\n\n\nmain()\n",
            "return model(", "model", "    model = Net()\n",
        ),
        (  # a method's parameter, called as obj.fit(net)
            "class Trainer:\n    def fit(self, model):\n        return model(torch.randn(1, 3, 8, 8))"
            "\n\n\nnet = Net()\nTrainer().fit(net)\n",
            "return model(", "model", "net = Net()\n",
        ),
        (  # model.forward(x), a global built under `if __name__ == "__main__":`
            "class Loop:\n    def step(self):\n        return model.forward(torch.randn(1, 3, 8, 8))"
            "\n\n\nif __name__ == '__main__':\n    model = Net()\n    Loop().step()\n",
            "model.forward(", "model", "    model = Net()\n",
        ),
    ],
)  # fmt: skip
def test_the_model_is_found_where_it_is_built(tmp_path, body, needle, recorded, after):
    project, script = _setup(tmp_path, NET + body)
    detail = _detail(script, needle, model=recorded)
    remedy = plan_lever(project, "compile", detail, "trial")
    assert remedy.changes and not remedy.skipped, remedy.skipped
    text = project.rendered({"compile"})[script.resolve()]
    indent = after[: len(after) - len(after.lstrip())]
    name = "net" if "net = Net()" in after else "model"
    assert after + f"{indent}{name}.compile()  # torchdoctor fix" in text, text
    _run_patched(tmp_path, text.replace(f"{name}.compile()", f"assert {name} is not None"))


def test_what_self_model_is_called_with_is_not_the_model(tmp_path):
    project, script = _setup(
        tmp_path,
        NET + "augment = nn.Identity()\n\n\nclass T:\n    def __init__(self):\n"
        "        self.model = Net()\n\n    def step(self, x):\n        return self.model(augment(x))\n",
    )
    remedy = plan_lever(project, "compile", _detail(script, "self.model(", model="self.model"), "t")
    assert not remedy.changes and "the model is self.model" in remedy.skipped[0].reason
