"""torchdoctor's accelerator paths on a real non-CPU device, each in its own processes.

They run wherever torch has an accelerator: on a GPU, and on a machine without one through
PyTorch's PrivateUse1 reference backend (OpenReg, device ``openreg``), built into a venv by
``../shared/accelerator/build-openreg.sh`` (docs/devices.md). That backend runs every op on the
host through the real accelerator machinery (torch.accelerator, torch.Event, torch.Stream, pinned
memory, the device allocator's statistics, autocast, the PrivateUse1 profiler): these tests prove
wiring and device-agnosticism, never timing. Without an accelerator they are skipped (CI).

    /tmp/orvenv/bin/python -m pytest tests/accelerator -m accelerator
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from paths import SCENARIOS
from torchdoctor.record import RunRecord

HAS_ACCELERATOR = hasattr(torch, "accelerator") and torch.accelerator.is_available()
pytestmark = [
    pytest.mark.accelerator,
    pytest.mark.skipif(
        not HAS_ACCELERATOR,
        reason="no accelerator here: build the OpenReg backend (docs/devices.md) or use a GPU",
    ),
]

#: A 2-layer MLP trained on pinned batches copied with non_blocking (a convolution is not
#: implemented by the reference backend; an MLP is).
MLP = """\
import sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = torch.accelerator.current_accelerator()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
loader = DataLoader(data, batch_size=32, shuffle=True, pin_memory=True)
for epoch in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1000):
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def _script(tmp_path: Path, text: str = MLP, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _torchdoctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "torchdoctor", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def _device_type() -> str:
    return torch.accelerator.current_accelerator().type


def test_a_run_on_the_device_is_timed_with_its_events(tmp_path):
    _script(tmp_path)
    _torchdoctor(tmp_path, "run", "--steps", "8", "--warmup", "2", "--quiet", "--json", "r.json",
                 "--", "train.py")  # fmt: skip
    record = RunRecord.load(tmp_path / "r.json")
    assert record.status == "complete"
    assert record.env.device.startswith(_device_type())
    assert record.env.clock == "device events (torch.Event)"
    assert record.parts_ms["forward"].median > 0 and record.parts_ms["backward"].median > 0
    # the model alone replayed the script's device batches (no host copy counted as its input)
    assert len(record.model_alone) == 8
    assert record.verdict.kind != "UNKNOWN"
    # the watched step's memory: on the device, with the allocator's peak and temporaries
    split = record.memory_split
    assert split.device.startswith(_device_type()) and split.peak > split.parameters > 0
    assert split.temporaries is not None and split.activations > 0


def test_trials_read_their_events_after_the_device_finished_and_memory_is_the_devices(tmp_path):
    _script(tmp_path)
    _torchdoctor(tmp_path, "run", "--steps", "6", "--warmup", "2", "--try",
                 "amp,batch-size,foreach,threads", "--quiet", "--json", "r.json", "--", "train.py")  # fmt: skip
    record = RunRecord.load(tmp_path / "r.json")
    assert record.status == "complete", record.notes
    trials = {t.name: t for t in record.trials}
    assert {"amp", "batch-size", "foreach", "threads"} <= set(trials), trials
    for name in ("amp", "foreach", "threads"):
        assert trials[name].status == "measured" and trials[name].steps, trials[name]
    points = trials["batch-size"].points
    assert [p.setting for p in points][:1] == ["64"] and all(p.samples_per_s for p in points)
    # memory per size from the device allocator: a few MB for this MLP, not the process's RSS
    # (hundreds of MB with torch loaded)
    assert all(p.memory_mb is not None and p.memory_mb < 64 for p in points), points
    assert trials["amp"].detail["device_type"] == _device_type()
    # --try implies --flops: the peak measured on the device with a matmul
    assert record.flops is not None and record.flops.peak_source.startswith("measured")


def test_the_prefetcher_copies_on_a_side_stream_and_hands_out_equal_batches():
    from torchdoctor import DevicePrefetcher

    device = torch.accelerator.current_accelerator()
    data = torch.utils.data.TensorDataset(torch.arange(64.0).reshape(16, 4), torch.arange(16))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    prefetcher = DevicePrefetcher(loader, device)
    assert prefetcher.stream is not None  # the stream path, not the plain copier
    assert prefetcher.stream != torch.accelerator.current_stream(device)
    for _ in range(2):  # the side stream is reused every epoch
        got = list(prefetcher)
        assert len(got) == len(loader)
        for (x, y), (ex, ey) in zip(got, loader):
            assert x.device.type == device.type and y.device.type == device.type
            assert torch.equal(x.cpu(), ex) and torch.equal(y.cpu(), ey)


def test_a_trace_of_the_device_is_recorded_and_analysed(tmp_path):
    _script(tmp_path)
    _torchdoctor(tmp_path, "run", "--steps", "6", "--warmup", "2", "--trace", "tr", "--quiet",
                 "--json", "r.json", "--", "train.py")  # fmt: skip
    traces = sorted((tmp_path / "tr").glob("*.json*"))
    assert traces, list((tmp_path / "tr").iterdir())
    out = _torchdoctor(tmp_path, "analyze", str(traces[0]), "--json", "a.json")
    analysed = RunRecord.load(tmp_path / "a.json")
    assert analysed.trace is not None, out.stdout[-2000:]
    assert analysed.trace.ranks and analysed.trace.ranks[0].steps, out.stdout[-2000:]


def test_a_whole_run_on_the_device_is_accounted(tmp_path):
    _script(tmp_path)
    _torchdoctor(tmp_path, "run", "--whole", "--steps", "6", "--warmup", "2", "--quiet",
                 "--json", "r.json", "--", "train.py", "3")  # fmt: skip
    record = RunRecord.load(tmp_path / "r.json")
    whole = record.whole_run
    assert whole is not None and record.env.device.startswith(_device_type())
    kinds = {k.kind: k for k in whole.categories}
    assert kinds["steps"].count >= 150  # 3 epochs of 64 batches
    assert abs(sum(k.seconds for k in whole.categories) - whole.wall_s) <= 0.01 * whole.wall_s


def test_a_rebuilt_constant_is_fixed_into_a_buffer_that_moves_with_its_first_read(tmp_path):
    # a buffer read as self.weight.to(device) in a module the script never moves would still
    # copy every step on a device: the sync finder, run on the patched script, says it is gone
    # seed 004's loss as first written: its weights built inline and moved every step, in a
    # loss module the script never moves (the scenario moves only the model)
    _script(tmp_path, (SCENARIOS / "sync_loss_inline.py").read_text())
    _torchdoctor(tmp_path, "fix", "--steps", "6", "--warmup", "2", "--rounds", "2", "--quiet",
                 "--json", "fix.json", "--", "train.py")  # fmt: skip
    record = RunRecord.load(tmp_path / "fix.json")
    assert any(f.kind == "constant-rebuilt" for f in record.findings), record.findings
    (remedy,) = [r for r in record.patch.remedies if r.numerics]
    # kept unless the whole patch measured slower: the reference backend's times say nothing
    # (it runs on the host), so only the wiring is asserted
    assert remedy.kept or remedy.reason == "the whole patch measured slower", remedy
    assert remedy.checked_losses and remedy.rechecked == "gone", remedy
    assert "self.weight = self.weight.to(logits.device)" in record.patch.diff


#: Blocks of layers on the device, each step's output kept on the device for the epoch's end.
BLOCKS_KEPT = """\
import torch
from torch import nn

device = torch.accelerator.current_accelerator()
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)) for _ in range(3)
        )

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


model = Net().to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
kept = []
for step in range(100000):
    x = torch.randn(1024, 256, device=device)
    out = model(x)
    loss = out.square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    kept.append(out.detach())  # 1 MB a step, on the device
"""


def test_memory_on_the_device_checkpointing_and_a_creep_are_the_devices(tmp_path):
    _script(tmp_path, BLOCKS_KEPT, "blocks.py")
    _torchdoctor(tmp_path, "run", "--steps", "6", "--warmup", "2", "--try", "checkpoint",
                 "--quiet", "--json", "r.json", "--", "blocks.py")  # fmt: skip
    record = RunRecord.load(tmp_path / "r.json")
    assert record.status == "complete", record.notes
    (trial,) = record.trials
    assert trial.status == "measured" and trial.detail["blocks"] == [
        "blocks.0", "blocks.1", "blocks.2"
    ]  # fmt: skip
    d = trial.detail
    assert d["activations_after"] < 0.6 * d["activations_before"]
    assert d["device"].startswith(_device_type()) and d["peak_after"] and d["peak_before"]
    course = record.memory_course
    assert course is not None and course.memory == "device" and course.used[-1] > course.used[0]
    (creep,) = [f for f in record.findings if f.kind == "loop.memory-creep"]
    assert creep.detail["device"].startswith(_device_type()) and creep.detail["mb_per_step"] == 1.0
    assert ".cpu()" in creep.fix
