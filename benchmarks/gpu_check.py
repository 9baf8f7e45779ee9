"""The GPU acceptance run: ``make gpu-check`` on a machine with a CUDA GPU.

Runs the tests marked ``gpu`` and ``accelerator``, then prints figures only a GPU can give, each
measured here, in this run:

1. the device-event clock against ``torch.profiler`` on the same loop: the mean step timed with
   torch.Event beside the profiler's mean step (a GPU-bound loop: they should agree within 5%);
2. ``DevicePrefetcher`` on a copy-heavy loop: the mean step with the prefetcher beside plain
   ``.to(device, non_blocking=True)`` copies (the prefetcher's should be no longer);
3. the seed-004 loss on the GPU: the host round-trips the sync finder names and what they cost;
4. ``--try amp,batch-size``: autocast's dtype (bf16 or fp16 with its GradScaler caveat) and the
   device memory the batch-size trial saw per size; and every lever on the accelerator test's
   MLP, with where each thread was if it stalls;
5. ``--flops``: the step's utilisation of the device's peak (MFU) against the table's peak;
6. the demo on the GPU (its diagnosis before and after, the measured speedup);
7. with two GPUs or more, a 2-rank NCCL job under ``--nproc-per-node 2`` (torchdoctor's own
   gloo group beside the job's NCCL one): its verdict and communication-free ceiling;
8. what capture adds to a launch-bound GPU step on the script's own clock
   (``benchmarks/observer_effect.py --device cuda``: one process and ``run --whole``);
9. out of memory on the GPU: a batch grown until it does not fit ends ``out-of-memory`` at its
   line, with the largest batch that fits;
10. memory on the GPU: a transformer step's split (the allocator's peak), ``--try checkpoint``
    (activations and the peak without and with it), and a list of logits kept on the device
    (a creep, with when the device's memory runs out).

Without a CUDA GPU it says so and exits 0 (the accelerator paths are tested on the OpenReg
reference backend: docs/devices.md).

    PYTHONPATH=src python benchmarks/gpu_check.py [--keep DIR] [--only tests,event,...]

``--keep DIR`` leaves the scripts, records and traces in DIR; ``--only`` runs the checks named
by their first word (tests, event, prefetcher, seed-004, trials, mlp-trials, 2-rank, observer,
demo, oom, memory).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the prefetcher and the sync kinds are used in-process
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    "PYTHONUNBUFFERED": "1",
}
#: Each check's bound (s): the whole run fits a lent GPU's minutes.
TIMEOUT_S = 240
#: The marked tests: each one's bound, and the whole set's.
TEST_TIMEOUT_S, TESTS_TIMEOUT_S = 150, 420

#: A GPU-bound loop: big matmuls on device-resident batches (no input pipeline to wait for).
GPU_BOUND = """\
import torch
from torch import nn
device = torch.device("cuda")
model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)]).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(2048, 4096, device=device)
for step in range(100000):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

#: The seed-004 loss (three host round-trips per step) on the GPU.
SYNC_LOSS = (
    (ROOT / "tests" / "scenarios" / "sync_loss.py")
    .read_text()
    .replace("loss_fn = WeightedLoss()", "model = model.cuda()\nloss_fn = WeightedLoss()")
    .replace(
        "loss = loss_fn(model(x), y)",
        "x, y = x.cuda(), y.cuda()\n        loss = loss_fn(model(x), y)",
    )
)


#: A batch that grows 4x a step on the GPU until one does not fit (the memory issue's script).
GROWS_OUT_OF_MEMORY = """
import torch
from torch import nn

device = torch.device("cuda")
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
batch = 256
for step in range(100):
    x = torch.randn(batch, 1024, device=device)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    batch *= 4
"""

#: A transformer on the GPU that keeps each step's logits on the device for an epoch-end metric.
GPU_MEMORY = """
import torch
from torch import nn

device = torch.device("cuda")
layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
model = nn.Sequential(
    nn.Embedding(1000, 512), nn.TransformerEncoder(layer, 4, enable_nested_tensor=False),
    nn.Linear(512, 1000),
).to(device)
opt = torch.optim.AdamW(model.parameters())
kept = []
for step in range(100000):
    x = torch.randint(0, 1000, (16, 256), device=device)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), x.flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
    kept.append(logits.detach())  # 16 MB a step, kept on the device
"""

CHECKS = (
    "tests", "event", "prefetcher", "seed-004", "trials", "mlp-trials", "2-rank", "observer", "demo",
    "oom", "memory",
)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="leave the scripts, records and traces here")
    parser.add_argument("--only", help=f"a comma list of checks: {','.join(CHECKS)}")
    args = parser.parse_args()
    only = [name.strip() for name in args.only.split(",")] if args.only else list(CHECKS)
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        parser.error(
            f"--only: no check named {', '.join(unknown)} (the checks: {', '.join(CHECKS)})"
        )
    if not torch.cuda.is_available():
        print(
            "gpu-check: no CUDA GPU here, nothing to check. The accelerator paths are tested on "
            "PyTorch's reference backend instead: docs/devices.md"
        )
        return 0
    print(f"gpu-check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    passed = "tests" not in only or run_tests()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        folder = (args.keep or Path(tmp)).resolve()  # the checks' runs start in it
        folder.mkdir(parents=True, exist_ok=True)
        for name, check in (
            ("event clock vs profiler", event_clock),
            ("prefetcher", prefetcher),
            ("seed-004 syncs", seed_004),
            ("trials", trials),
            ("mlp-trials on the accelerator test's MLP", trials_mlp),
            ("2-rank NCCL job", nccl_job),
            ("observer effect", observer_effect),
            ("demo", demo),
            ("oom (a batch grown until it does not fit)", out_of_memory),
            ("memory (the step's split, checkpointing, a creep on the device)", memory),
        ):
            if name.split()[0] not in only:
                continue
            started = time.perf_counter()
            try:
                said = check(folder)
            except Exception as exc:  # noqa: BLE001 - one check's failure is printed, the rest run
                said = f"FAILED: {type(exc).__name__}: {exc}"
            print(f"{name}: {said} [{time.perf_counter() - started:.0f} s]", flush=True)
    return 0 if passed else 1


def run_tests() -> bool:
    """The gpu- and accelerator-marked tests; prints their summary, and the failures."""
    started = time.perf_counter()
    try:
        tests = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-m", "gpu or accelerator", "-p",
             "no:cacheprovider", "--timeout", str(TEST_TIMEOUT_S)],
            cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=TESTS_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        print(f"tests: still running after {TESTS_TIMEOUT_S} s, stopped; their output:")
        print((out or "")[-3000:])
        return False
    lines = tests.stdout.strip().splitlines() or ["no output"]
    for line in lines:
        if line.startswith(("FAILED", "ERROR")):
            print("  ", line[:300])
    print(f"tests: {lines[-1]} [{time.perf_counter() - started:.0f} s]", flush=True)
    if tests.returncode != 0:
        print(tests.stdout[-3000:], tests.stderr[-1500:], sep="\n")
    return tests.returncode == 0


def _run(folder: Path, script: str, text: str, *args: str, bounded: bool = False) -> dict:
    """``torchdoctor run`` of ``text`` saved as ``script``; its record. ``bounded``: a run the
    ``--max-seconds`` bound may stop (exit 5) still gives its record, with ``exit`` added."""
    (folder / script).write_text(text)
    record = folder / f"{script}.json"
    out = subprocess.run(
        [sys.executable, "-m", "torchdoctor", "run", "--quiet", "--json", str(record), *args,
         "--", script],
        cwd=folder, env=ENV, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    if out.returncode != 0 and not (bounded and record.exists()):
        raise RuntimeError(out.stdout[-1500:] + out.stderr[-1500:])
    return {**json.loads(record.read_text()), "exit": out.returncode}


def out_of_memory(folder: Path) -> str:
    """A device out of memory is the run's own ending: status, exit status 6, the line, the
    size asked for."""
    rec = _run(folder, "grows.py", GROWS_OUT_OF_MEMORY, "--steps", "40", "--warmup", "2",
               "--no-counterfactuals", bounded=True)  # fmt: skip
    ending = rec.get("ending") or {}
    return (
        f"status {rec['status']}, exit {rec['exit']} (6 expected); {ending.get('words') or '-'}; "
        f"{len(rec['steps']['step_ms'])} steps measured"
    )


def memory(folder: Path) -> str:
    """The step's memory on the GPU (the allocator's peak and temporaries), what checkpointing
    frees of the activations and of the peak, and a creep on the device with when it runs out."""
    rec = _run(folder, "gpu_memory.py", GPU_MEMORY, "--steps", "10", "--try", "checkpoint")
    mb = 2**20
    split = rec.get("memory_split") or {}
    peak, act = split.get("peak"), split.get("activations")
    said = f"activations {act / mb:.0f} MB, peak {peak / mb:.0f} MB" if peak and act else "no split"
    for t in rec["trials"]:
        d = t.get("detail") or {}
        if t["name"] == "checkpoint" and d.get("activations_after") is not None:
            peaks = (
                f", peak {d['peak_before'] / mb:.0f} -> {d['peak_after'] / mb:.0f} MB"
                if d.get("peak_before") and d.get("peak_after")
                else ", no peak"
            )
            said += (
                f"; checkpoint on {', '.join(d.get('blocks', []))}: activations "
                f"{d['activations_before'] / mb:.0f} -> {d['activations_after'] / mb:.0f} MB"
                f"{peaks}, step {(t.get('judged') or {}).get('speedup')}x"
            )
    creep = [f["title"] for f in rec["findings"] if f["kind"] == "loop.memory-creep"]
    return said + f"; creep: {creep[0] if creep else 'none found'}"


def event_clock(folder: Path) -> str:
    rec = _run(folder, "gpu_bound.py", GPU_BOUND, "--steps", "20", "--trace", "trace")
    events_ms = rec["step_ms"]["mean"]
    ranks = (rec.get("trace") or {}).get("ranks") or []
    steps = ranks[0]["steps"] if ranks else []
    kernel_ms = (ranks[0].get("launch") or {}).get("kernel_ms") if ranks else None
    if not steps or not kernel_ms:
        return f"events {events_ms:.2f} ms per step; the trace had no steps to compare"
    # The host runs ahead of a GPU-bound loop: the trace's step spans time launches. The
    # kernels' time over the trace's steps is a rough reference only: the trace's kernels
    # include those of steps launched before or after its step spans.
    device_ms = kernel_ms / len(steps)
    host_ms = sum(s["wall_ms"] for s in steps) / len(steps)
    return (
        f"events {events_ms:.2f} ms per step; the whole trace's kernels over its "
        f"{len(steps)} steps {device_ms:.2f} ms ({abs(events_ms - device_ms) / device_ms:.1%} "
        f"apart); the trace's host step spans {host_ms:.2f} ms; clock {rec['env']['clock']!r}"
    )


def prefetcher(folder: Path) -> str:
    from torchdoctor import DevicePrefetcher

    device = torch.device("cuda")
    data = torch.utils.data.TensorDataset(torch.randn(64, 64, 3, 224, 224))
    loader = torch.utils.data.DataLoader(data, batch_size=None, pin_memory=True)
    weight = torch.randn(224, 224, device=device)

    def mean_step(batches) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        n = 0
        for (x,) in batches:
            x = x.to(device, non_blocking=True)
            for _ in range(4):  # compute about as long as the copy
                x = torch.tanh(x @ weight)
            n += 1
        torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1000 / n

    plain, prefetched = [], []
    for _ in range(3):
        plain.append(mean_step(loader))
        prefetched.append(mean_step(DevicePrefetcher(loader, device)))
    a, b = min(plain), min(prefetched)
    return f"plain copies {a:.2f} ms per step, prefetcher {b:.2f} ms ({a / b:.2f}x)"


def seed_004(folder: Path) -> str:
    rec = _run(folder, "sync_loss.py", SYNC_LOSS, "--steps", "20")
    from torchdoctor.analysis.syncs import KINDS

    found = [f for f in rec["findings"] if f["kind"] in KINDS]
    words = "; ".join(
        f"{f['kind']} at line {f.get('line')} ({f.get('cost_ms')} ms per step)" for f in found
    )
    return f"step {rec['step_ms']['mean']:.2f} ms; host round-trips found: {words or 'none'}"


def trials(folder: Path) -> str:
    rec = _run(folder, "gpu_trials.py", GPU_BOUND, "--steps", "10", "--try", "amp,batch-size")
    by_name = {t["name"]: t for t in rec["trials"]}
    amp = by_name.get("amp", {})
    sizes = by_name.get("batch-size", {}).get("points", [])
    memory = ", ".join(f"{p['setting']}: {p.get('memory_mb')} MB" for p in sizes) or "none"
    flops = rec.get("flops") or {}
    mfu = flops.get("utilisation")
    return (
        f"amp {amp.get('speedup')}x ({amp.get('detail', {}).get('dtype')}); batch sizes' device "
        f"memory {memory}; MFU {mfu if mfu is None else f'{mfu:.1%}'} of "
        f"{flops.get('peak_source', 'no peak')}"
    )


def trials_mlp(folder: Path) -> str:
    """The accelerator test's MLP (pinned batches, Adam) under every lever that applies: on an
    H200 it stopped stepping inside ``loss.backward()`` after the amp trial (2026-11-26); where
    each thread was is printed when it stalls again."""
    sys.path.insert(0, str(ROOT / "tests" / "accelerator"))
    from test_accelerator_paths import MLP

    rec = _run(folder, "mlp.py", MLP, "--steps", "6", "--warmup", "2", "--try",
               "amp,batch-size,foreach,threads", "--max-seconds", "90", bounded=True)  # fmt: skip
    trials = ", ".join(
        f"{t['name']} {t['status']} {(t.get('judged') or {}).get('speedup')}x"
        for t in rec["trials"]
    )
    said = f"exit {rec['exit']}, {rec['status']}; trials: {trials or 'none'}"
    if rec.get("stopped_at"):
        stack = "\n    ".join(rec.get("stopped_stack", [])[:8])
        threads = "\n  ".join(
            "other thread:\n    " + "\n    ".join(t) for t in rec.get("stopped_threads", [])
        )
        said += f"\n  stopped at {rec['stopped_at']}:\n    {stack}\n  {threads}"
    return said


def demo(folder: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "torchdoctor", "demo", "--workdir", str(folder / "demo"),
         "--json", str(folder / "demo-json"), "--html", str(folder / "demo.html")],
        cwd=folder, env=ENV, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-1500:] + out.stderr[-1500:])
    before = json.loads((folder / "demo-json" / "before.json").read_text())
    after = json.loads((folder / "demo-json" / "after.json").read_text())
    side = json.loads((folder / "demo-json" / "speedup.json").read_text())["judged"]
    return (
        f"device {before['env']['device']}: before {before['verdict']['kind']} "
        f"{before['step_ms']['mean']:.2f} ms per step, after {after['verdict']['kind']} "
        f"{after['step_ms']['mean']:.2f} ms; side by side {side['judgement']} "
        f"{side['speedup']:.2f}x ({side['low']:.2f}-{side['high']:.2f})"
    )


DDP = """\
import os
import torch
import torch.distributed as dist
from torch import nn
dist.init_process_group("nccl")
rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(6)]).cuda(), device_ids=[rank]
)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(512, 2048, device="cuda")
for step in range(100000):
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
"""


def nccl_job(folder: Path) -> str:
    if torch.cuda.device_count() < 2:
        return f"skipped: {torch.cuda.device_count()} GPU here, the job needs 2"
    rec = _run(folder, "ddp.py", DDP, "--nproc-per-node", "2", "--steps", "10")
    job = rec.get("distributed") or {}
    return (
        f"{rec['verdict']['kind']}, backend {job.get('backend')}, no-sync step "
        f"{job.get('no_sync_step_ms')} ms, communication-free ceiling {job.get('comm_ceiling')}x"
    )


def observer_effect(folder: Path) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "observer_effect.py"), "--device", "cuda",
         "--jobs", "one,whole", "--threads", "default", "--rounds", "2"],
        cwd=folder, env=ENV, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-1500:] + out.stderr[-1500:])
    return "\n  " + out.stdout.strip().replace("\n", "\n  ")


if __name__ == "__main__":
    sys.exit(main())
