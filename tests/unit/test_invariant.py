"""Under torchdoctor a script behaves as without it up to the stop: its own exceptions (and
torch's, through our wrappers) are the script's, with their type; an exception raised in
torchdoctor's own code during the script is ``internal-error``, never the script's."""

from __future__ import annotations

import textwrap

import pytest

from torchdoctor.capture import _step_hooks
from torchdoctor.options import RunOptions
from torchdoctor.process import Target, run_target

SCRIPT = """
import sys
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

class Samples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if "--bad-sample" in sys.argv and i == 20:
            raise KeyError(f"sample {i} is missing")
        return torch.randn(4), i % 2

if "--bad-to" in sys.argv:
    torch.ones(2).to("no-such-device")
batch_size = -1 if "--bad-loader" in sys.argv else 4
loader = DataLoader(Samples(), batch_size=batch_size)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""


def _run(tmp_path, *argv):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    options = RunOptions(steps=200, warmup=1, sync_steps=0, counterfactuals=False)
    return run_target(Target(script=str(script), argv=list(argv)), options)


@pytest.mark.parametrize(
    "flag,kind",
    [
        ("--bad-sample", KeyError),  # the script's Dataset, called through our __next__
        ("--bad-loader", ValueError),  # torch's, through our DataLoader.__init__
        ("--bad-to", RuntimeError),  # Tensor.to (C), through our wrapper
    ],
)
def test_the_scripts_and_torchs_errors_stay_the_scripts(tmp_path, flag, kind):
    out = _run(tmp_path, flag)
    assert out.record.status == "script-error", out.record.notes
    assert isinstance(out.error, kind)
    assert out.record.status != "internal-error"


def test_an_error_in_torchdoctors_own_hook_is_an_internal_error(tmp_path, monkeypatch):
    # Our bookkeeping of the batch fails (int(batch) raises in our own frame).
    monkeypatch.setattr(_step_hooks, "tensor_ids", int)
    out = _run(tmp_path)
    assert out.record.status == "internal-error", out.record.notes
    assert isinstance(out.error, TypeError)
    assert out.exit_status == 4
