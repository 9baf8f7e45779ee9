"""`torchdoctor run` on loop shapes from the wild: no optimizer, batches built in the loop.

The scripts in tests/scenarios/ imitate a classic RNN language-model example (parameters updated
by hand) and a small GPT trainer (batches sliced from a memmap by `get_batch`, fetched between the
forward and the backward, gradients accumulated).
"""

from __future__ import annotations

import pytest

from paths import SCENARIOS
from torchdoctor.options import RunOptions
from torchdoctor.process import Target, run_target

#: The tests marked timing: their verdicts, speedups and picks come from measured durations
#: (`make test-load` runs them beside a busy process); the rest assert what no load changes.
pytestmark = pytest.mark.integration


def run(script: str, *argv: str, **kw):
    options = dict(steps=6, warmup=3, sync_steps=1)
    options.update(kw)
    return run_target(
        Target(script=str(SCENARIOS / script), argv=list(argv)), RunOptions(**options)
    )


def test_a_manual_sgd_loop_is_measured_and_stopped_early():
    # Ten epochs would take minutes; the run must stop once its steps are measured.
    out = run("manual_sgd_rnn.py", "--epochs", "10", "--tokens", "20000")
    rec = out.record
    assert out.exit_status == 0, rec.notes
    assert rec.status == "complete"  # stopped on purpose, not run to its end
    assert rec.step_boundary == "backward" and rec.backwards_per_step == 1
    assert rec.measured_steps == 6
    assert rec.verdict.kind != "UNKNOWN"
    assert rec.seen["optimizer_steps"] == 0
    assert any("no optimizer.step() seen" in n for n in rec.notes)
    # The batches are slices of a tensor made by get_batch (and the hidden state is repackaged).
    assert any(b.startswith("get_batch (") for b in rec.built_inputs)


def test_manual_sgd_with_accumulation_counts_one_step_per_update():
    out = run("manual_sgd_rnn.py", "--accumulate", "2", "--tokens", "40000")
    assert out.record.step_boundary == "backward"
    assert out.record.backwards_per_step == 2


@pytest.mark.timing
def test_batches_built_in_the_loop_are_input():
    # 400 ms builds: beside a busy process (make test-load) the model's step grew to 300 ms and
    # two 150 ms builds made input exactly half of the step.
    out = run("built_batches.py", "--build-ms", "400", "--batch", "2", "--block", "8", steps=4)
    rec = out.record
    assert out.exit_status == 0, rec.notes
    assert rec.step_boundary == "optimizer"
    assert [b.split(" ")[0] for b in rec.built_inputs] == ["get_batch"]
    # Two 400 ms builds per step (two micro-steps) against a tiny model: input dominates, and
    # replaying the built batches removes it.
    assert rec.verdict.kind == "INPUT-BOUND"
    assert rec.verdict.shares["input"] > 0.5
    assert rec.ceiling_speedup is not None and rec.ceiling_speedup > 1.5
    assert "building its batches" in rec.verdict.why
    assert "DataLoader(num_workers=N" in rec.verdict.next
