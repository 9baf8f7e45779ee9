"""The sync finder under a whole capture session, whose own patches sit between the user's line
and the operation (``Tensor.to``) or around the user's function (a batch builder)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from torchdoctor.capture._session import CaptureSession, StopRun
from torchdoctor.options import RunOptions

HERE = Path(__file__).resolve()
TOKENS = np.arange(5_000, dtype=np.uint16) % 50


def _line(text: str) -> int:
    return next(n for n, line in enumerate(HERE.read_text().splitlines(), 1) if text in line)


def get_batch():
    ix = torch.randint(len(TOKENS) - 9, (4,))
    x = torch.stack([torch.from_numpy(TOKENS[i : i + 8].astype(np.int64)) for i in ix])
    return x, x[:, 0].clone()


def _findings(loop):
    session = CaptureSession(
        RunOptions(steps=1, warmup=4, sync_steps=2, counterfactuals=False, loader_doctor="never")
    )
    session.install()
    try:
        loop()
    except StopRun:
        pass
    finally:
        session.uninstall()
    return session, session.data.sync_findings


def _loop(copy_back: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(64, 50))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(40):
        x, y = get_batch()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if copy_back:
            loss.detach().to("cpu")  # COPY-BACK: a device-to-host copy on an accelerator


def test_a_users_copy_to_the_host_is_found_through_the_sessions_patch():
    _, findings = _findings(lambda: _loop(copy_back=True))
    assert [(f.kind, f.line) for f in findings] == [("to-host", _line("# COPY-BACK"))]


def test_a_built_batch_is_neither_a_finding_nor_unseen():
    session, findings = _findings(lambda: _loop(copy_back=False))
    assert findings == []
    assert [b.split(" ")[0] for b in session.inputs.described()] == ["get_batch"]
