"""One step's memory by kind (``capture._memory_split.MemoryWatch``): exact bytes of parameters,
gradients, optimizer state and the activations saved for backward, by the block that saved them,
and every hook gone after."""

from __future__ import annotations

import torch
from torch import nn

from torchdoctor.capture._memory_split import OUTSIDE, MemoryWatch

N, A, B, C = 16, 32, 256, 8


def _step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    x, y = torch.randn(N, A), torch.randint(0, C, (N,))
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_a_step_is_split_by_kind_and_its_activations_by_block():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(A, B), nn.ReLU(), nn.Linear(B, C))
    optimizer = torch.optim.Adam(model.parameters())
    _step(model, optimizer)  # the optimizer's state exists from its first step
    watch = MemoryWatch([model], None)
    watch.start()
    _step(model, optimizer)
    split = watch.stop([optimizer])
    params = 4 * (A * B + B + B * C + C)
    assert split.parameters == params and split.gradients == params
    state = [v for s in optimizer.state.values() for v in s.values()]
    assert split.optimizer_state == sum(t.untyped_storage().nbytes() for t in state)
    assert split.optimizer_state >= 2 * params  # Adam's two moments
    # saved for backward: the input the first Linear needs for its weight's gradient, the
    # ReLU's output (the second Linear's input: the same storage, counted once), and the
    # loss's own tensors outside any module; never a parameter
    by_block = {m.module: m.nbytes for m in split.largest}
    assert by_block["0"] == 4 * N * A
    assert by_block["1"] == 4 * N * B
    assert split.largest[0].module == "1" and split.largest[0].type == "ReLU"
    assert OUTSIDE in by_block and "2" not in by_block
    assert split.activations == sum(by_block.values())
    assert split.peak is None and split.temporaries is None  # the CPU tells no peak
    assert split.rows == N  # the batch's samples: the model's input's leading dimension


def test_the_watch_changes_nothing_and_leaves_no_hook():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(A, B), nn.ReLU(), nn.Linear(B, C))
    x = torch.randn(N, A)
    plain = model(x).sum()
    plain.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    watch = MemoryWatch([model], None)
    watch.start()
    watched = model(x).sum()
    watched.backward()
    assert torch.equal(plain, watched)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), expected))
    watch.close()
    watch.close()  # idempotent
    assert not torch.nn.modules.module._global_forward_pre_hooks
    assert not torch.nn.modules.module._global_forward_hooks
    assert watch.stop([]) is None  # closed: nothing to tell
    # an encoder's layers are its blocks (its next part is a container)
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2, enable_nested_tensor=False
    )
    watch = MemoryWatch([encoder], None)
    watch.start()
    encoder(torch.randn(5, 3, 8)).sum().backward()
    split = watch.stop([])
    assert {m.module for m in split.largest} >= {"layers.0", "layers.1"}, split.largest


def test_a_step_accumulating_micro_batches_is_counted_by_one_of_them():
    """Four micro-batches of 16, each backward before the next forward: the step saves four
    micro-batches' activations in all but holds one at a time; the batch that fits was told
    from all four over 16 samples (4x too few)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(A, B), nn.ReLU(), nn.Linear(B, C))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = MemoryWatch([model], None)
    watch.start()
    for _ in range(4):
        x, y = torch.randn(N, A), torch.randint(0, C, (N,))
        nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    split = watch.stop([optimizer])
    one = MemoryWatch([model], None)
    one.start()
    nn.functional.cross_entropy(model(torch.randn(N, A)), torch.randint(0, C, (N,))).backward()
    single = one.stop([optimizer])
    assert split.rows == N and split.first_pass == single.activations == single.first_pass
    assert split.activations > 2 * split.first_pass  # later micro-batches' too


def test_an_address_freed_and_taken_again_is_a_new_tensor():
    """Each micro-batch's input at the address the one before freed (the allocator's choice, made
    certain here by one buffer): the later inputs were taken for the first one's storage and left
    out, so a machine whose allocator reuses addresses counted one micro-batch."""
    torch.manual_seed(0)
    model = nn.Linear(A, C)
    buffer = bytearray(4 * N * A)
    watch = MemoryWatch([model], None)
    watch.start()
    for _ in range(3):
        x = torch.frombuffer(buffer, dtype=torch.float32).view(N, A)
        model(x).sum().backward()
        del x  # backward let it go too: its address is free
    live = torch.frombuffer(buffer, dtype=torch.float32).view(N, A)
    model(live).sum().backward(retain_graph=True)  # saved, still held: the same storage...
    model(live).sum().backward()  # ...saved again is counted once
    split = watch.stop([])
    assert split.first_pass == 4 * N * A
    assert split.activations == 4 * 4 * N * A
    # a buffer that lives on, saved through a new view every micro-batch (a causal mask cut to
    # the sequence): its storage is counted once, not once a micro-batch
    mask = torch.rand(4 * N, A)
    watch = MemoryWatch([model], None)
    watch.start()
    for _ in range(4):
        model(mask[:N] * 1.0).sum().backward()  # a fresh input each time...
        (model.weight * mask[:C]).sum().backward()  # ...and the mask's view, saved by the mul
    split = watch.stop([])
    assert split.activations == 4 * 4 * N * A + mask.untyped_storage().nbytes()


def test_a_batch_passed_by_keyword_is_counted_in_samples():
    """`model(**batch)` (a Hugging Face call): no positional tensor, so no estimate was told."""

    class Keyed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(A, C)

        def forward(self, input_ids=None, labels=None):
            return nn.functional.cross_entropy(self.fc(input_ids), labels)

    model = Keyed()
    watch = MemoryWatch([model], None)
    watch.start()
    model(input_ids=torch.randn(N, A), labels=torch.randint(0, C, (N,))).backward()
    split = watch.stop([])
    assert split.rows == N


def test_a_frozen_teacher_is_no_second_model_in_the_labels():
    student, teacher = nn.Sequential(nn.Linear(A, B), nn.ReLU()), nn.Linear(A, B)
    teacher.requires_grad_(False)
    watch = MemoryWatch([student, teacher], None)
    watch.start()
    with torch.no_grad():
        target = teacher(torch.randn(N, A))
    (student(torch.randn(N, A)) - target).pow(2).mean().backward()
    split = watch.stop([])
    assert {m.module for m in split.largest} >= {"0", "1"}, split.largest  # not "Sequential.0"
