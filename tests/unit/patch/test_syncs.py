"""The host round-trip rewrites: where each lands, that the rewritten code computes the same
values, and what is left out with the reason."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest
import torch

from paths import SCENARIOS
from torchdoctor.patch import Project, plan_syncs
from torchdoctor.patch._measure import rechecked
from torchdoctor.patch._remedies import Remedy
from torchdoctor.record import GONE, Finding, RunRecord


def _finding(kind: str, path: Path, needle: str) -> Finding:
    line = next(i + 1 for i, text in enumerate(path.read_text().splitlines()) if needle in text)
    return Finding(kind, f"{kind} here", "fix it", file=str(path), line=line)


def _loss_findings(path: Path) -> list[Finding]:
    return [
        _finding("constant-rebuilt", path, "weight = torch.tensor("),
        _finding("tensor-assert", path, "assert target.max()"),
        _finding("python-index", path, "log_probs[range("),
    ]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # the scenario trains at import: only its loss class is wanted
    source = path.read_text().split("\ndata = TensorDataset")[0]
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def test_the_seed_004_loss_is_rewritten_and_computes_the_same(tmp_path):
    script = tmp_path / "train.py"
    script.write_text((SCENARIOS / "sync_loss.py").read_text())
    project = Project(script, root=tmp_path)
    remedies = plan_syncs(project, _loss_findings(script))
    assert [r.key for r in remedies] == ["sync-1", "sync-2", "sync-3"]
    assert all(r.numerics and r.changes and not r.skipped for r in remedies), remedies
    text = project.rendered({r.key for r in remedies})[script.resolve()]
    assert (
        '    """The custom loss, as the article found it."""\n\n'
        "    def __init__(self):\n        super().__init__()\n"
        '        self.register_buffer("weight", torch.tensor(CLASS_WEIGHTS), persistent=False)\n\n'
    ) in text
    # "# every step" was the rebuilt tensor's: the line that no longer rebuilds it drops it
    # moved in place at its first read: no copy after, whether or not the script moves the loss
    assert "        weight = self.weight = self.weight.to(logits.device)\n" in text
    assert (
        '        torch._assert_async(target.max() < NUM_CLASSES, "labels out of range")\n' in text
    )
    assert "log_probs[torch.arange(len(target), device=log_probs.device), target]" in text
    assert "[range(" not in text
    # the same values, and the rewritten check still fails on a bad label
    patched = tmp_path / "patched.py"
    patched.write_text(text)
    before, after = _load(script, "before_loss"), _load(patched, "after_loss")
    after_loss = after.WeightedLoss()
    logits, target = torch.randn(8, 4), torch.randint(0, 4, (8,))
    assert torch.equal(before.WeightedLoss()(logits, target), after_loss(logits, target))
    assert after_loss.state_dict() == {}  # persistent=False: checkpoints do not change
    assert after_loss.weight.device == logits.device
    with pytest.raises(RuntimeError):
        after_loss(logits, torch.full((8,), 7))
    diff = project.diff({r.key for r in remedies})
    out = subprocess.run(["git", "apply", "--check", "-"], cwd=tmp_path, input=diff, text=True)
    assert out.returncode == 0


def test_seed_004s_inline_constant_becomes_a_buffer_named_by_the_parameter(tmp_path):
    # the article's first form: weighted_nll(pred, target, torch.Tensor([0.1] * N).to(d)) in a
    # loss module the script never moves; it was left out ("no single assignment")
    script = tmp_path / "train.py"
    script.write_text((SCENARIOS / "sync_loss_inline.py").read_text())
    project = Project(script, root=tmp_path)
    (remedy,) = plan_syncs(project, [_finding("constant-rebuilt", script, "loss = weighted_nll(")])
    assert remedy.changes and not remedy.skipped, remedy.skipped
    text = project.rendered({remedy.key})[script.resolve()]
    assert (
        "    def __init__(self):\n        super().__init__()\n        self.register_buffer("
        '"weight", torch.Tensor([0.1] * NUM_CLASSES), persistent=False)\n'
    ) in text
    assert (
        "        self.weight = self.weight.to(logits.device)\n"
        "        loss = weighted_nll(pred, target, self.weight)\n"
    ) in text
    patched = tmp_path / "patched.py"
    patched.write_text(text)
    before, after = _load(script, "before_inline"), _load(patched, "after_inline")
    logits, target = torch.randn(8, 4), torch.randint(0, 4, (8,))
    after_loss = after.CrossEntropyLoss()
    assert torch.equal(before.CrossEntropyLoss()(logits, target), after_loss(logits, target))
    assert after_loss.state_dict() == {}


def test_a_buffer_goes_after_super_init_in_an_existing_init(tmp_path):
    script = tmp_path / "m.py"
    script.write_text(
        "import torch\nfrom torch import nn\nW = [1.0, 2.0]\n"
        "class M(nn.Module):\n"
        "    def __init__(self, k):\n        super().__init__()\n        self.k = k\n"
        "    def forward(self, x):\n        w = torch.tensor(W)\n        return x * w\n"
    )
    project = Project(script, root=tmp_path)
    (remedy,) = plan_syncs(project, [_finding("constant-rebuilt", script, "w = torch")])
    text = project.rendered({remedy.key})[script.resolve()]
    assert (
        "        super().__init__()\n"
        '        self.register_buffer("w", torch.tensor(W), persistent=False)\n'
        "        self.k = k\n"
    ) in text
    assert "        w = self.w\n" in text  # no device given: no .to()


@pytest.mark.parametrize(
    ("code", "kind", "needle", "words"),
    [
        (
            "class M(nn.Module):\n    def forward(self, x, ws):\n"
            "        w = torch.tensor(ws)\n        return x * w\n",
            "constant-rebuilt", "w = torch", "a local or a parameter feeds it",
        ),
        (
            "class M(Base):\n    def forward(self, x):\n"
            "        w = torch.tensor([1.0])\n        return x * w\n",
            "constant-rebuilt", "w = torch", "M has no __init__",
        ),
        ("def f(x):\n    w = torch.tensor([1.0])\n    return w\n",
         "constant-rebuilt", "w = torch", "not built in a method"),
        ("def f(x):\n    return x[[0, 1]]\n", "python-index", "return x", "no `x[range(...)]`"),
        ("def f(x):\n    if x.sum() > 0:\n        pass\n", "tensor-assert", "if x", "no single assert"),
    ],
)  # fmt: skip
def test_what_is_not_a_safe_rewrite_is_left_out(tmp_path, code, kind, needle, words):
    script = tmp_path / "m.py"
    script.write_text("import torch\nfrom torch import nn\nBase = nn.Module\n" + code)
    project = Project(script, root=tmp_path)
    (remedy,) = plan_syncs(project, [_finding(kind, script, needle)])
    assert not remedy.changes and words in remedy.skipped[0].reason, remedy.skipped
    assert project.diff({remedy.key}) == ""


def test_a_file_without_import_torch_is_left_alone(tmp_path):
    script = tmp_path / "m.py"
    script.write_text("from torch import tensor\ndef f(t):\n    assert t.max() < 3\n")
    project = Project(script, root=tmp_path)
    (remedy,) = plan_syncs(project, [_finding("tensor-assert", script, "assert")])
    assert "does not `import torch`" in remedy.skipped[0].reason


def test_a_logged_item_is_read_every_n_steps_of_a_counted_loop(tmp_path):
    script = tmp_path / "t.py"
    script.write_text(
        "import torch\nloader = []\n"
        "for i, (x, y) in enumerate(loader):\n"
        "    loss = x.sum()\n"
        "    # the step's log line\n"
        "    print('loss', loss.item())\n"
        "    done = True\n"
    )
    project = Project(script, root=tmp_path)
    (remedy,) = plan_syncs(project, [_finding("item", script, "print(")])
    assert remedy.title == ".item() for logging → every 10 steps (t.py:6)"
    assert project.rendered({remedy.key})[script.resolve()].endswith(
        "    loss = x.sum()\n"
        "    # the step's log line\n"
        "    if i % 10 == 0:\n"
        "        print('loss', loss.item())\n"
        "    done = True\n"
    )


@pytest.mark.parametrize(
    ("loop", "words"),
    [
        ("for step in range(9):\n    total += loss.item()\n", "its value is used"),
        ("for step in range(9):\n    if step % 5 == 0:\n        print(loss.item())\n",
         "already read only on some steps"),
        ("for x in loader:\n    print(loss.item())\n", "no step counter"),
        ("losses = []\nfor step in range(9):\n    losses.append(loss.item())\n",
         "feeds append(...), not a log line"),
    ],
)  # fmt: skip
def test_an_item_whose_value_matters_or_that_has_no_counter_is_kept(tmp_path, loop, words):
    script = tmp_path / "t.py"
    script.write_text("import torch\nloss = torch.ones(())\nloader = []\ntotal = 0\n" + loop)
    project = Project(script, root=tmp_path)
    (remedy,) = plan_syncs(project, [_finding("item", script, ".item()")])
    assert not remedy.changes and words in remedy.skipped[0].reason


def test_a_new_init_is_set_apart_by_blank_lines(tmp_path):
    script = tmp_path / "m.py"
    script.write_text(
        "import torch\nfrom torch import nn\nW = [1.0]\n"
        "class M(nn.Module):\n    def forward(self, x):\n        w = torch.tensor(W)\n"
        "        return x * w\n"
    )
    project = Project(script, root=tmp_path)
    (remedy,) = plan_syncs(project, [_finding("constant-rebuilt", script, "w = torch")])
    assert project.rendered({remedy.key})[script.resolve()].startswith(
        "import torch\nfrom torch import nn\nW = [1.0]\nclass M(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        '        self.register_buffer("w", torch.tensor(W), persistent=False)\n\n'
        "    def forward(self, x):\n"
    )


def _watched(*findings: Finding) -> RunRecord:
    record = RunRecord(findings=list(findings))
    record.sync_sampled_steps = 2
    return record


def test_the_sync_finder_on_the_patched_script_says_whether_the_round_trip_is_gone(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    project = Project(script, root=tmp_path)
    remedy = Remedy("sync-1", "", numerics=True, finding=("constant-rebuilt", str(script), 17))
    own = Finding(
        "constant-rebuilt", "t", "f", file=str(script), line=17, source="w = torch.tensor(W)"
    )
    other = Finding(
        "constant-rebuilt", "t", "f", file=str(script), line=40, source="v = torch.tensor(V)"
    )
    base = _watched(own, other)
    # the other constant, unrewritten, is still there (its line moved with the patch): gone
    moved = Finding("constant-rebuilt", "t", "f", file=str(script), line=44, source=other.source)
    assert rechecked(remedy, base, _watched(moved), project) == GONE
    # a round trip of its kind at the rewritten read: still found, where
    read = Finding(
        "constant-rebuilt", "t", "f", file=str(script), line=18, source="w = self.w.to(d)"
    )
    assert rechecked(remedy, base, _watched(moved, read), project) == (
        "still finds constant-rebuilt at train.py:18 (w = self.w.to(d))"
    )
    # nothing watched, or the original's watch did not find it: nothing is said
    assert rechecked(remedy, base, RunRecord(), project) == ""
    assert rechecked(remedy, _watched(other), _watched(), project) == ""
