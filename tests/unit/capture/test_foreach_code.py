"""The foreach trial's paste is the script's own line that built the optimizer, with only the
flag added (``capture._levers.with_flag``)."""

from __future__ import annotations

import pytest

from torchdoctor.capture._levers import with_flag

SOURCE = """\
import torch
opt_d = torch.optim.Adam(D.parameters(), 1e-3)
opt = Adam(
    m.parameters(),
    lr=1e-3,
)
x = make(Adam(p))
opt2 = torch.optim.SGD(params)  # lr (default)
opt3 = torch.optim.SGD(params, lr=0.1,)
"""


@pytest.mark.parametrize(
    "line, kind, expected",
    [
        (2, "Adam", "opt_d = torch.optim.Adam(D.parameters(), 1e-3, fused=True)"),
        (3, "Adam", "opt = Adam(m.parameters(), lr=1e-3, fused=True)"),
        (7, "Adam", None),  # built inside a factory call: not shown as a line to paste
        (8, "SGD", "opt2 = torch.optim.SGD(params, fused=True)"),
        (9, "SGD", "opt3 = torch.optim.SGD(params, lr=0.1, fused=True)"),
        (2, "SGD", None),  # not that optimizer's line
    ],
)
def test_the_line_that_built_the_optimizer_gets_the_flag(tmp_path, line, kind, expected):
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    assert with_flag(f"{script}:{line}", kind, "fused") == expected


def test_without_a_site_there_is_no_line():
    assert with_flag(None, "Adam", "fused") is None and with_flag("nowhere", "Adam", "f") is None
