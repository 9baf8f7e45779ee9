"""The parts of a step by name: the one place their names, their words and their verdict group
are written (the renderers and the verdict take them from here). Torch-free."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: The parts of a step, in the order they are shown. They sum to the step.
#: ``evaluation`` is an outermost call of a trained model in eval mode with grad off inside a
#: training step (a validation pass run every step): its time was the forward's before.
STEP_PARTS = (
    "data_wait",
    "to_device",
    "forward",
    "backward",
    "optimizer",
    "evaluation",
    "other",
)

#: Parts a run seldom has: summarised (``parts_ms``) and shown only where a step had some.
OPTIONAL_PARTS = frozenset({"evaluation"})


def parts_shown(summaries: Iterable[Mapping[str, object]]) -> tuple[str, ...]:
    """The parts a table or chart of these summaries (``parts_ms``, one per run or rank) shows:
    every part but an optional one none of them has."""
    have = {name for summary in summaries for name in summary}
    return tuple(p for p in STEP_PARTS if p not in OPTIONAL_PARTS or p in have)


#: Each part as a table row names it.
PART_LABELS = {
    "data_wait": "data wait",
    "to_device": "to device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "evaluation": "evaluation",
    "other": "other (Python, logging, syncs)",
}
#: Each part as a narrow column header names it (two lines at most).
PART_HEADERS = {
    "data_wait": "data\nwait",
    "to_device": "to\ndevice",
    "forward": "fwd",
    "backward": "bwd",
    "optimizer": "optim",
    "evaluation": "eval",
    "other": "other",
}
#: Each part in a sentence ("mostly waiting for data").
PART_WORDS = {
    "data_wait": "waiting for data",
    "to_device": "copying batches to the device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "the optimizer",
    "evaluation": "evaluation inside the step",
    "other": "host work between the calls",
}
#: The verdict's group of each part: input, compute or host.
PART_GROUPS = {
    "data_wait": "input",
    "to_device": "input",
    "forward": "compute",
    "backward": "compute",
    "optimizer": "compute",
    "evaluation": "compute",
    "other": "host",
}
