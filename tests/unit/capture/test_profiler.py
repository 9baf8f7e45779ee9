"""StepProfiler on CPU: a real torch.profiler trace, in TensorBoard's layout, read back by analyze."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from torchdoctor.analysis.trace_analysis import analyze_trace, attach_trace
from torchdoctor.capture.profiler import LABEL_PREFIX, StepProfiler
from torchdoctor.record import RunRecord, Verdict


@pytest.fixture(scope="module", autouse=True)
def profiler_imports_loaded(tmp_path_factory):
    """Profile once before the hygiene snapshot of the first test.

    The first profile imports torch._dynamo and friends lazily, and importing dynamo rebinds
    torch.manual_seed: a one-time import effect of torch itself, not a patch of ours. Each test
    then still proves the profiler leaves torch as it found it.
    """
    with StepProfiler(tmp_path_factory.mktemp("warm"), wait=0, warmup=1, active=1) as prof:
        for _ in range(2):
            torch.ones(2).sum()
            prof.step()


class SlowDataset(Dataset):
    """Each sample costs 5 ms: 40 ms per batch of 8, far above the tiny model's step."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int):
        time.sleep(0.005)
        return torch.randn(16), torch.tensor(i % 2)


def _train(prof: StepProfiler, steps: int | None = None) -> int:
    model = torch.nn.Linear(16, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for x, y in DataLoader(SlowDataset(), batch_size=8):
        with prof.label("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()
        done += 1
        if steps is not None and done >= steps:
            break
    return done


@pytest.mark.integration
def test_cpu_trace_is_tensorboard_shaped_and_analyze_reads_it_back(tmp_path):
    prof = StepProfiler(tmp_path / "traces", wait=1, warmup=1, active=3)
    prof.start()
    try:
        assert _train(prof) == 6
    finally:
        prof.stop()
    assert not prof.running
    (path,) = prof.trace_paths
    # TensorBoard's profiler plugin and Perfetto read <dir>/<worker>.<ts>.pt.trace.json
    assert path.parent == tmp_path / "traces" and path.name.endswith(".pt.trace.json")
    doc = json.loads(path.read_text())
    names = [e.get("name", "") for e in doc["traceEvents"]]
    assert sum(n.startswith("ProfilerStep#") for n in names) == 3
    assert LABEL_PREFIX + "forward" in names

    record = analyze_trace(str(path.parent))
    rank = record.trace.ranks[0]
    assert len(rank.steps) == 3 and not rank.has_gpu
    # The sleeping dataset dominates each step: the trace says so in run's words.
    assert record.verdict.kind == "INPUT-BOUND"
    assert rank.dataloader_share > 0.3

    # What `run --trace` does with the files: the run's record gains the trace section.
    run_record = RunRecord(verdict=Verdict("HOST-BOUND", "why", "next"))
    attach_trace(run_record, prof.trace_paths)
    assert run_record.verdict.kind == "HOST-BOUND"
    assert run_record.trace.verdict.kind == "INPUT-BOUND"
    assert any(f.kind == "dataloader" for f in run_record.findings)


def test_stop_is_idempotent_and_releases_before_the_active_steps(tmp_path):
    prof = StepProfiler(tmp_path, wait=5, warmup=1, active=1)
    prof.start()
    _train(prof, steps=2)  # stopped while still waiting: nothing recorded
    prof.stop()
    prof.stop()
    assert not prof.running and prof.trace_paths == []
    prof.step()  # after stop: a no-op, not an error
    assert prof.steps_seen == 2
    assert torch.autograd.profiler._is_profiler_enabled is False


def test_label_is_a_no_op_outside_a_profile(tmp_path):
    prof = StepProfiler(tmp_path)
    with prof.label("phase"):
        pass
    with pytest.raises(ValueError):
        StepProfiler(tmp_path, active=0)


def test_context_manager_stops_on_error(tmp_path):
    with pytest.raises(RuntimeError), StepProfiler(tmp_path, wait=0, warmup=1, active=2) as prof:
        prof.step()
        raise RuntimeError("user code failed")
    assert not prof.running
    assert torch.autograd.profiler._is_profiler_enabled is False
