"""A sync made inside a library names the library's line and the user's line that leads there,
once per pair, with the library's setting where one is known (torch's own code included)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import torch
import torch.nn as nn

from torchdoctor.capture.syncs import SyncWatcher

HERE = Path(__file__).resolve()

torch.manual_seed(0)


def lineno_of(text: str) -> int:
    return next(n for n, line in enumerate(HERE.read_text().splitlines(), 1) if text in line)


def test_each_library_site_and_user_line_is_one_finding_with_its_count(tmp_path, monkeypatch):
    lib_dir = tmp_path / "site-packages" / "fakelib"
    lib_dir.mkdir(parents=True)
    (lib_dir / "__init__.py").write_text("")
    (lib_dir / "logging.py").write_text(
        textwrap.dedent(
            """
            def _to_number(value):
                return value.item()

            def log(value):
                _to_number(value)
                return bool(value > 0)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    import fakelib.logging

    w = torch.ones(2, requires_grad=True)
    try:
        with SyncWatcher(on_accelerator=False) as watcher:
            for _ in range(2):
                for _ in range(2):
                    fakelib.logging.log(w.sum())  # the user's call, twice a step
                fakelib.logging.log(w.mean())  # a second user line
                watcher.mark_step()
    finally:
        for name in ("fakelib.logging", "fakelib"):
            sys.modules.pop(name, None)
    found = {
        (f.kind, f.line, f.detail["via"][0].rsplit("/", 1)[1], f.calls_per_step)
        for f in watcher.findings()
    }
    first, second = lineno_of("# the user's call, twice"), lineno_of("# a second user line")
    assert found == {
        ("item", first, "logging.py:3", 2.0),
        ("scalar-conversion", first, "logging.py:7", 2.0),
        ("item", second, "logging.py:3", 1.0),
        ("scalar-conversion", second, "logging.py:7", 1.0),
    }
    finding = watcher.findings()[0]
    assert finding.detail["library"] == "fakelib"
    assert finding.detail["library_source"] in ("return value.item()", "return bool(value > 0)")
    assert ", inside fakelib (" in finding.title
    assert "no setting" in finding.fix and "setting" not in finding.detail


def test_torch_internal_syncs_name_torchs_line_and_its_setting():
    model = nn.Linear(4, 2)
    x, target = torch.randn(8, 4), torch.randn(8, 2)
    with SyncWatcher(on_accelerator=False) as watcher:
        for _ in range(2):
            mu = model(x)
            scale = torch.ones_like(mu)
            dist = torch.distributions.Normal(mu, scale)  # validates its arguments
            loss = -dist.log_prob(target).mean()  # validates the value
            torch.unique(mu.round())  # the user's own call: no library
            loss.backward()
            watcher.mark_step()
    by_line = {f.line: f for f in watcher.findings()}
    made = by_line[lineno_of("# validates its arguments")]
    scored = by_line[lineno_of("# validates the value")]
    for finding in (made, scored):
        assert finding.detail["library"] == "torch"
        assert "torch/distributions/distribution.py:" in finding.detail["via"][0]
        assert "set_default_validate_args(False)" in finding.fix
        assert finding.calls_per_step >= 1.0
    mine = by_line[lineno_of("# the user's own call")]
    assert mine.kind == "unique" and "library" not in mine.detail  # torch's wrappers are not
