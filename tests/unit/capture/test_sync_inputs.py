"""What reaches the model is its input: batches a script builds itself are not copy findings,
and batches a CPU-only script never moves count as device tensors (syncs on them are found)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from torchdoctor.capture.syncs import SyncWatcher

HERE = Path(__file__).resolve()
CPU = torch.device("cpu")  # stands in for the accelerator on a CPU run
T, B, VOCAB = 8, 4, 50
TOKENS = np.arange(2_000, dtype=np.uint16) % VOCAB

# The first optimizer step imports torch._dynamo lazily, which rebinds torch attributes; do it
# before the hygiene fixture takes its snapshot.
torch.manual_seed(0)
torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1).step()


def lineno_of(text: str) -> int:
    return next(n for n, line in enumerate(HERE.read_text().splitlines(), 1) if text in line)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.head = nn.Linear(8, VOCAB)

    def forward(self, idx, targets=None):
        logits = self.head(self.emb(idx))
        return nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))


def get_batch(move: bool):
    ix = torch.randint(len(TOKENS) - T - 1, (B,))
    x = torch.stack([torch.from_numpy(TOKENS[i : i + T].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(TOKENS[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
    if move:
        x, y = x.to(CPU), y.to(CPU)
    return x, y


def gpt_loop(move: bool, view: bool = False, steps: int = 2):
    """nanoGPT's loop: the next batch is fetched between forward and backward; the watcher is
    started, marked and stopped as the sync-sample phase does, then the script goes on."""
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watcher = SyncWatcher(on_accelerator=False)
    told: list[list] = []
    X, Y = get_batch(move)
    watcher.start()
    watcher.hook_model_inputs([model])
    for step in range(steps + 1):
        if view:  # the model gets a slice of what was copied
            loss = model(X[:, :-1], targets=Y[:, :-1])
        else:
            loss = model(X, targets=Y)
        X, Y = get_batch(move)
        weight = torch.tensor([2.0])  # a constant rebuilt each step: still a finding
        (loss * weight.expand(1)).sum().backward()
        opt.step()
        if step < steps - 1:
            watcher.mark_step()
        elif step == steps - 1:
            watcher.stop(then=told.append)
    return watcher, told, model


def test_a_batch_the_loop_builds_and_moves_is_its_input_not_a_copy():
    watcher, told, model = gpt_loop(move=True)
    found = {(f.kind, f.line) for f in watcher.findings()}
    assert found == {("constant-rebuilt", lineno_of("weight = torch.tensor([2.0])"))}
    # Told twice: at once (the batch fetched in the last step had not reached the model yet),
    # then at the next forward, which took it; the waiting hooks are gone.
    assert len(told) == 2
    assert len(told[0]) == 3 and [(f.kind, f.line) for f in told[1]] == sorted(found)
    assert not model._forward_pre_hooks


def test_a_batch_built_on_the_host_and_never_moved_is_its_input_too():
    watcher, told, _ = gpt_loop(move=False)
    assert {f.kind for f in told[-1]} == {"constant-rebuilt"}
    # `for i in ix` over a host tensor and the slices it indexes are host work, not syncs.
    weight_line = lineno_of("weight = torch.tensor([2.0])")
    assert {e.line for e in watcher.events} == {weight_line}


def test_a_view_of_the_copied_batch_names_its_base():
    _, told, _ = gpt_loop(move=True, view=True)
    assert {f.kind for f in told[-1]} == {"constant-rebuilt"}


def test_without_the_model_hook_the_batch_copy_is_still_reported():
    # The counter-check: the same loop, the hook never installed (as before the change).
    model = TinyLM()
    with SyncWatcher(on_accelerator=False) as watcher:
        for _ in range(2):
            x, y = get_batch(move=True)
            model(x, targets=y).backward()
            watcher.mark_step()
    assert {f.kind for f in watcher.findings()} == {"tensor-from-python-data"}


# -- CPU-only scripts: batches that are never moved ------------------------------------------


def cpu_only_loop(checks: bool, move: bool):
    """A DataLoader loop as written on a laptop: with ``move=False`` nothing calls ``.to()``."""
    model = nn.Linear(8, 4)
    batches = [(torch.randn(16, 8), torch.randint(0, 4, (16,))) for _ in range(2)]
    ids = {id(t) for batch in batches for t in batch}
    watcher = SyncWatcher(on_accelerator=False, is_batch_tensor=lambda t: id(t) in ids)
    watcher.start()
    watcher.hook_model_inputs([model])
    try:
        for x, target in batches:
            if move:
                x, target = x.to(CPU), target.to(CPU)
            if checks:
                assert target.max() < 4  # a sync on a batch tensor
                if (target == 0).all():  # a branch on one
                    continue
                mean_label = target.float().mean().item()  # a number from one
                first = x[[0, 1]]  # Python indexing of one
                assert mean_label >= 0 and first.shape[0] == 2
            loss = nn.functional.cross_entropy(model(x), target)
            loss.backward()
            watcher.mark_step()
    finally:
        watcher.stop()
    return watcher.findings()


def test_syncs_on_a_batch_that_is_never_moved_are_found():
    found = {(f.kind, f.line) for f in cpu_only_loop(checks=True, move=False)}
    assert found == {
        ("tensor-assert", lineno_of("assert target.max() < 4  #")),
        ("tensor-branch", lineno_of("if (target == 0).all():  #")),
        ("item", lineno_of("mean_label = target.float().mean().item()")),
        ("python-index", lineno_of("first = x[[0, 1]]  #")),
    }


def test_the_same_syncs_after_a_move_are_found_once_and_a_clean_loop_has_none():
    moved = {f.kind for f in cpu_only_loop(checks=True, move=True)}
    assert moved == {"tensor-assert", "tensor-branch", "item", "python-index"}
    assert cpu_only_loop(checks=False, move=False) == []
    assert cpu_only_loop(checks=False, move=True) == []


def test_host_work_on_a_batch_before_its_move_stays_host_work():
    model = nn.Linear(8, 4)
    x, labels = torch.randn(16, 8), torch.randint(0, 4, (16,))
    watcher = SyncWatcher(on_accelerator=False, is_batch_tensor=lambda t: t is x or t is labels)
    watcher.start()
    watcher.hook_model_inputs([model])
    try:
        assert labels.max() < 4  # host data, before the copy
        x, labels = x.to(CPU), labels.to(CPU)
        nn.functional.cross_entropy(model(x), labels).backward()
    finally:
        watcher.stop()
    assert watcher.findings() == []
