"""Out of memory with the batch that fits (issue "Memory joined with speed", item 4): a script
whose batch grows until the host's allocator refuses it ends ``out-of-memory`` at its line, and
the step the memory split counted tells the largest batch that fits."""

from __future__ import annotations

import psutil
import pytest
import torch

from torchdoctor.options import RunOptions
from torchdoctor.process import Target, run_target

pytestmark = pytest.mark.integration

#: 32 samples a step, then a batch of 2**44 (its 4 PiB are refused at once, nothing touched).
GROWS = """\
import torch

model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.Adam(model.parameters())
for step in range(200):
    rows = 32 if step < 5 else 2**44
    x = torch.randn(rows, 64)  # the batch
    model(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
"""


def test_a_batch_that_grows_out_of_memory_is_told_the_batch_that_fits(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(GROWS)
    threads = torch.get_num_threads()
    try:
        out = run_target(
            Target(script=str(script)),
            RunOptions(steps=3, warmup=1, sync_steps=2, counterfactuals=False),
        )
    finally:
        torch.set_num_threads(threads)
    rec = out.record
    assert rec.status == "out-of-memory", rec.notes
    split = rec.memory_split
    assert split is not None and split.rows == 32
    words = rec.ending.words
    assert f"at {script}:7 (`x = torch.randn(rows, 64)  # the batch`)" in words
    fixed = split.parameters + split.gradients + split.optimizer_state
    expected = int((0.9 * psutil.virtual_memory().total - fixed) // (split.activations / 32))
    told = words.split("the largest batch that fits is about ")[1].split(" ")[0]
    found = int(told.replace(",", ""))
    assert abs(found - expected) <= expected * 0.01  # the host's total, read twice
    assert "a step of 32 samples fitted" in words and "temporaries not counted" in words
    # 4 PiB asked at once: more than the whole host memory, a shape to check first
    assert "that one allocation is more than the whole host memory" in words
    assert rec.verdict.next.startswith("check the shape of the tensor"), rec.verdict.next
