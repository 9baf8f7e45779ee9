"""The in-loop sweep trains on real DataLoader clones with the threads of each trial set, and gives
the script its own thread count back however it ends; step costs are injected."""

from __future__ import annotations

import pytest
import torch
import torch.utils.data.dataloader as dataloader_module
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.capture import InLoopSweep, Patcher
from torchdoctor.capture._inloop_sweep import PROBE_STEPS_FACTOR, PROBE_WARM_STEPS
from torchdoctor.loader import MODEL_ALONE, WorkerThreadPolicy

#: The script's own thread count in these tests (not the machine's default, so restoring it is
#: told apart from resetting torch).
SCRIPT_THREADS = 3

#: Injected steps/s: workers help, and a step with more than 1 thread and busy workers is 3x
#: slower (they compete for the cores); without workers the thread count does not matter, and
#: the model alone (the probe) is as fast on 1 thread.
STEPS_PER_S = {MODEL_ALONE: 250.0, 0: 10.0, 1: 18.0, 2: 30.0}


def step_ms(workers: int, threads: int) -> float:
    slowdown = 3.0 if workers > 0 and threads > 1 else 1.0
    return 1000.0 * slowdown / STEPS_PER_S[workers]


@pytest.fixture
def script_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(SCRIPT_THREADS)
    try:
        yield SCRIPT_THREADS
    finally:
        torch.set_num_threads(before)


def make_sweep() -> InLoopSweep:
    loader = DataLoader(TensorDataset(torch.arange(64.0).reshape(32, 2)), batch_size=4)
    policy = WorkerThreadPolicy(
        [0, 1, 2], cpu_count=2, default_threads=torch.get_num_threads(), current_workers=0
    )
    return InLoopSweep(loader, policy, steps_per_setting=2, patcher=Patcher())


def train(sweep: InLoopSweep, max_steps: int = 1000) -> list[tuple[int, int, int]]:
    """The training loop: ``(workers, threads of the setting, torch's threads)`` per step."""
    original_next = dataloader_module._BaseDataLoaderIter.__next__
    seen = []
    replayed = set()
    for _ in range(max_steps):
        batch = sweep.next_batch(original_next)
        assert sweep.workers is not None and sweep.threads is not None
        if sweep.workers == MODEL_ALONE:
            replayed.add(id(batch[0]))
        seen.append((sweep.workers, sweep.threads, torch.get_num_threads()))
        if sweep.on_step_end(step_ms(sweep.workers, torch.get_num_threads()), 1):
            break
    assert len(replayed) <= 1  # the probe serves one batch over and over: the model alone
    return seen


def test_each_trial_runs_with_its_threads_and_the_scripts_own_come_back(script_threads):
    sweep = make_sweep()
    assert sweep.start()
    seen = train(sweep)
    assert all(threads == actual for _, threads, actual in seen)
    # The model alone on its threads and on 1, then the workers on 1 thread (the probe found the
    # threads idle), and the script as it is (no measured steps were given).
    tried = list(dict.fromkeys((w, t) for w, t, _ in seen))
    assert tried == [
        (MODEL_ALONE, SCRIPT_THREADS),
        (MODEL_ALONE, 1),
        (0, 1),
        (1, 1),
        (2, 1),
        (0, SCRIPT_THREADS),
    ]
    result = sweep.result()
    assert (result.best_workers, result.best_threads) == (2, 1)
    assert result.default_threads == SCRIPT_THREADS and result.threads_change == 1
    assert result.best.batches_per_s == pytest.approx(30.0)
    assert torch.get_num_threads() == script_threads  # the sweep ended by itself


def test_a_sweep_stopped_half_way_gives_the_threads_back(script_threads):
    sweep = make_sweep()
    sweep.start()
    # The model alone on its threads (2 warm steps, 4 x 2 counted), then 1 step on 1 thread.
    seen = train(sweep, max_steps=PROBE_WARM_STEPS + PROBE_STEPS_FACTOR * 2 + 1)
    assert seen[-1] == (MODEL_ALONE, 1, 1)
    sweep.close()  # what the phase's close does on every ending
    assert torch.get_num_threads() == script_threads
    sweep.close()  # idempotent
    assert torch.get_num_threads() == script_threads


def test_an_error_in_a_step_gives_the_threads_back(script_threads):
    sweep = make_sweep()
    sweep.start()
    with pytest.raises(RuntimeError, match="the script's own error"):
        try:
            original_next = dataloader_module._BaseDataLoaderIter.__next__
            while torch.get_num_threads() == script_threads:
                sweep.next_batch(original_next)
                sweep.on_step_end(step_ms(0, SCRIPT_THREADS), 1)
            raise RuntimeError("the script's own error")
        finally:
            sweep.close()
    assert torch.get_num_threads() == script_threads


def test_one_preempted_probe_step_does_not_decide_the_threads(script_threads):
    # The model alone is as fast on 1 thread, but one of its 1-thread probe steps is preempted
    # (10x its time): by the mean, 1 thread would seem 2x slower and the path would keep threads.
    sweep = make_sweep()
    sweep.start()
    original_next = dataloader_module._BaseDataLoaderIter.__next__
    probe_steps = 0
    for _ in range(1000):
        sweep.next_batch(original_next)
        ms = step_ms(sweep.workers, torch.get_num_threads())
        if (sweep.workers, sweep.threads) == (MODEL_ALONE, 1):
            probe_steps += 1
            if probe_steps == PROBE_WARM_STEPS + 3:
                ms *= 10
        if sweep.on_step_end(ms, 1):
            break
    result = sweep.result()
    assert [p.batches_per_s for p in result.threads_probe] == pytest.approx([250.0, 250.0])
    assert (result.best_workers, result.best_threads) == (2, 1)
