"""Each corpus snippet yields exactly the findings its `# expect:` markers name, at their lines."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from paths import DATA
from torchdoctor.capture.syncs import SyncWatcher

CORPUS = DATA / "sync_corpus"
SNIPPETS = sorted(CORPUS.glob("*.py"))
MARKER = re.compile(r"#\s*expect:\s*([a-z-]+)")

# The first optimizer step and manual_seed import torch._dynamo lazily, which rebinds torch
# attributes; do it before the hygiene fixture takes its snapshot.
torch.manual_seed(0)
torch.optim.AdamW(nn.Linear(1, 1).parameters()).step()


def expected(path: Path) -> set[tuple[str, int]]:
    """(kind, line) for every `# expect: kind` marker in a snippet."""
    lines = path.read_text().splitlines()
    return {(m.group(1), n) for n, text in enumerate(lines, 1) if (m := MARKER.search(text))}


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"sync_corpus_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_steps(path: Path, steps: int = 2, batch_rule: bool = False):
    """Two training steps of a snippet on the CPU under a SyncWatcher, like `torchdoctor run`."""
    module = load(path)
    torch.manual_seed(0)
    model = nn.Linear(8, 10)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(torch.randn(16, 8), torch.randint(1, 10, (16,))) for _ in range(steps)]
    batch_ids = {id(t) for batch in batches for t in batch}
    watcher = SyncWatcher(
        on_accelerator=False,
        is_batch_tensor=(lambda t: id(t) in batch_ids) if batch_rule else None,
    )
    watcher.start()
    if batch_rule:  # as the runner does: what reaches the model is its input
        watcher.hook_model_inputs([model])
    try:
        for x, y in batches:
            module.step(model, optimizer, x, y, torch.device("cpu"))
            watcher.mark_step()
    finally:
        watcher.stop()
    return watcher.findings(steps)


def test_corpus_is_big_enough():
    bad = [p for p in SNIPPETS if not p.stem.startswith("clean_")]
    kinds = {kind for p in bad for kind, _ in expected(p)}
    assert len(bad) >= 15
    assert len(kinds) >= 14, kinds
    assert all(expected(p) for p in bad), "every anti-pattern snippet needs a marker"
    assert not any(expected(p) for p in SNIPPETS if p.stem.startswith("clean_"))


@pytest.mark.parametrize("batch_rule", [False, True], ids=["plain", "batch-callback"])
@pytest.mark.parametrize("path", SNIPPETS, ids=[p.stem for p in SNIPPETS])
def test_snippet_yields_exactly_its_findings(path: Path, batch_rule: bool):
    findings = run_steps(path, batch_rule=batch_rule)
    got = {(f.kind, f.line) for f in findings}
    assert got == expected(path), [(f.kind, f.line, f.source) for f in findings]
    for f in findings:
        assert Path(f.file) == path
        assert f.source and f.source in path.read_text()
        assert f.calls_per_step == pytest.approx(1.0)
        assert "on an accelerator" in f.title
        assert f.fix


def test_seed004_findings_have_the_seed_fixes():
    findings = {f.kind: f for f in run_steps(CORPUS / "seed004_loss.py")}
    assert "register_buffer" in findings["constant-rebuilt"].fix
    assert "CrossEntropyLoss" in findings["constant-rebuilt"].fix
    assert "torch.arange(n, device=" in findings["python-index"].fix
    assert "Dataset" in findings["tensor-assert"].fix
    assert "would be a host-to-device copy" in findings["constant-rebuilt"].title
    assert "would block on an accelerator" in findings["tensor-assert"].title
