"""The amp trial's guard (``capture._autocast_guard``): only an op's refusal of the reduced
precision, under the trial's autocast, is run again without it; anything else is raised as it
came, and the failed attempt is told once."""

from __future__ import annotations

import pytest
import torch

from torchdoctor.capture._autocast_guard import guarded


def _forward(error: Exception):
    calls = []

    def forward(x):
        calls.append(torch.is_autocast_enabled("cpu"))
        if torch.is_autocast_enabled("cpu"):
            raise error
        return x * 2

    return forward, calls


def test_a_refusal_of_bf16_is_run_again_in_float32_and_told():
    forward, calls = _forward(RuntimeError("mkldnn_rnn: bf16 path needs avx512bw"))
    told, live = [], [True]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = guarded(forward, "cpu", live, told.append)(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 2.0)) and calls == [True, False]
    assert told == ["RuntimeError: mkldnn_rnn: bf16 path needs avx512bw"] and live == [False]


@pytest.mark.parametrize(
    "error",
    [torch.OutOfMemoryError("CUDA out of memory"), RuntimeError("the script's own bug")],
    ids=["out-of-memory", "the-scripts-error"],
)
def test_anything_else_is_raised_as_it_came(error):
    forward, calls = _forward(error)
    told = []
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(type(error)):
        guarded(forward, "cpu", [True], told.append)(torch.ones(2))
    assert calls == [True] and told == []
