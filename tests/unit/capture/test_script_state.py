"""What the script already does, probed from its first training forward: in the warmup the run's
device is not known yet, so autocast is asked of the device the model's parameters are on."""

from __future__ import annotations

import torch
from torch import nn

from torchdoctor.capture._script_state import ScriptState, parameter_device_type


def test_the_device_before_the_runs_is_known_is_the_parameters():
    assert parameter_device_type(nn.Linear(2, 2, device="meta")) == "meta"
    assert parameter_device_type(nn.Linear(2, 2)) == "cpu"
    assert parameter_device_type(nn.ReLU()) == "cpu"  # no parameter


def test_autocast_is_seen_with_the_device_unknown_and_known():
    model = nn.Linear(2, 2)
    for device in (None, torch.device("cpu")):
        state = ScriptState()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            state.probe_forward(model, device)
        assert state.autocast_dtype == "bfloat16", device
    # a module on another device than the CPU is asked of that device's autocast (which the
    # CPU's does not answer for): the meta device has none, so nothing is said
    state = ScriptState()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        state.probe_forward(nn.Linear(2, 2, device="meta"), None)
    assert state.autocast_dtype is None
