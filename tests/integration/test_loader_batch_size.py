"""The record's loader batch size when no ``batch_size`` argument names it: a batch sampler's
(Hugging Face Trainer, a user's wrapper), or the batches' own (an iterable dataset)."""

from __future__ import annotations

import pytest

from torchdoctor.options import RunOptions
from torchdoctor.process import Target, run_target
from torchdoctor.record import BATCH_SIZE_MEASURED, RunRecord

pytestmark = pytest.mark.integration

#: A training loop over ``LOADER``, which each test defines.
LOOP = """
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler
from torch.utils.data import TensorDataset

class Chunks(IterableDataset):
    def __iter__(self):
        for start in range(0, 600, 6):
            yield torch.randn(6, 4)

class SkipFirst:
    def __init__(self, batch_sampler):
        self.batch_sampler = batch_sampler
    def __iter__(self):
        return iter(list(self.batch_sampler)[1:])
    def __len__(self):
        return len(self.batch_sampler) - 1

class Triples:
    def __iter__(self):
        return iter([[i, i + 1, i + 2] for i in range(0, 60, 3)])
    def __len__(self):
        return 20

rows = TensorDataset(torch.randn(64, 4))
loader = {loader}
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(50):
    for batch in loader:
        x = batch[0] if isinstance(batch, list) else batch
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
"""


def run_loop(tmp_path, loader: str, **options) -> RunRecord:
    script = tmp_path / "loop.py"
    script.write_text(LOOP.format(loader=loader))
    options = {"steps": 3, "warmup": 1, "counterfactuals": False, **options}
    out = run_target(Target(script=str(script)), RunOptions(**options))
    assert out.exit_status == 0, out.record.notes
    return out.record


@pytest.mark.parametrize(
    ("loader", "size", "source"),
    [
        ("DataLoader(Chunks(), batch_size=None)", 6, BATCH_SIZE_MEASURED),
        ("DataLoader(rows, batch_sampler=Triples())", 3, BATCH_SIZE_MEASURED),
        (
            "DataLoader(rows, batch_sampler=SkipFirst(BatchSampler(SequentialSampler(rows), 5, False)))",
            5,
            "batch_sampler.batch_sampler.batch_size",
        ),
    ],
)
def test_the_record_gives_the_batch_size_the_loop_receives(tmp_path, loader, size, source):
    record = run_loop(tmp_path, loader)
    assert (record.loader.batch_size, record.loader.batch_size_source) == (size, source)


def test_injected_worker_settings_keep_a_wrapped_batch_sampler(tmp_path):
    # The --fix re-run injects settings into the script's own DataLoader(...) call; with a batch
    # sampler the loader must not also get a batch_size (DataLoader raises).
    record = run_loop(
        tmp_path,
        "DataLoader(rows, batch_sampler=SkipFirst(BatchSampler(SequentialSampler(rows), 5, False)))",
        loader_overrides={"num_workers": 1, "persistent_workers": True},
    )
    assert record.loader.num_workers == 1 and record.loader.persistent_workers
    assert record.loader.batch_size == 5


def test_hugging_face_trainer_end_to_end(hf_trainer_run):
    res = hf_trainer_run.done  # shared with test_syncs_scenarios (tests/shared_runs.py)
    assert res.returncode == 0, res.stderr[-2000:]
    record = RunRecord.load(hf_trainer_run.record_path)
    # The Trainer's DataLoader has batch_size=None: the size sits in its batch sampler.
    assert record.loader.batch_size == 4
    assert record.loader.batch_size_source == "batch_sampler.batch_size"
    assert record.verdict is not None and record.verdict.kind
    assert "batch_size=4 (from batch_sampler.batch_size)" in hf_trainer_run.said
