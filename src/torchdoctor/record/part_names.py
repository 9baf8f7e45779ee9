"""The parts of a step by name: the one place their names, their words and their verdict group
are written (the renderers and the verdict take them from here). Torch-free."""

from __future__ import annotations

#: The parts of a step, in the order they are shown. They sum to the step.
STEP_PARTS = ("data_wait", "to_device", "forward", "backward", "optimizer", "other")

#: Each part as a table row names it.
PART_LABELS = {
    "data_wait": "data wait",
    "to_device": "to device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "other": "other (Python, logging, syncs)",
}
#: Each part as a narrow column header names it (two lines at most).
PART_HEADERS = {
    "data_wait": "data\nwait",
    "to_device": "to\ndevice",
    "forward": "fwd",
    "backward": "bwd",
    "optimizer": "optim",
    "other": "other",
}
#: Each part in a sentence ("mostly waiting for data").
PART_WORDS = {
    "data_wait": "waiting for data",
    "to_device": "copying batches to the device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "the optimizer",
    "other": "host work between the calls",
}
#: The verdict's group of each part: input, compute or host.
PART_GROUPS = {
    "data_wait": "input",
    "to_device": "input",
    "forward": "compute",
    "backward": "compute",
    "optimizer": "compute",
    "other": "host",
}
