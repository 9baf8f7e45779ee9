"""The levers ``run --try`` pulls, by name: the one table their names and facts are written in.

``--try``'s choices (:mod:`torchdoctor.options`), the trials phase's levers
(``capture.phases.trials``) and the levers ``torchdoctor fix`` writes into the code
(:mod:`torchdoctor.patch`) are all read from :data:`LEVERS`; a name spelled in one of them and
not the others was a ``KeyError`` at run time. Torch-free: the command line builds ``--try``
from it before any handler runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from .part_names import STEP_PARTS

AMP, CHANNELS_LAST, FOREACH, THREADS, BATCH_SIZE, COMPILE, CHECKPOINT = (
    "amp",
    "channels-last",
    "foreach",
    "threads",
    "batch-size",
    "compile",
    "checkpoint",
)


@dataclass(frozen=True)
class LeverFacts:
    """What one lever is, apart from how it is pulled (that is the capture side's).

    Attributes:
        name: its ``--try`` name.
        title: what it changes, in the words of ``fix``'s report.
        parts: the step parts (:data:`~torchdoctor.record.part_names.STEP_PARTS`) it can
            change; a trial cannot move the other parts, so they bound what it may gain.
        fix_remedy: the remedy ``torchdoctor fix`` writes it into the code as (its key in the
            patch), or ``None`` when ``fix`` does not write it.
        adds_at_most: the parts it may run once more at worst (checkpointing recomputes the
            forward in the backward): their time bounds how much slower it may make the step.
    """

    name: str
    title: str
    parts: tuple[str, ...]
    fix_remedy: str | None = None
    adds_at_most: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [p for p in self.parts if p not in STEP_PARTS]
        if unknown or not self.parts:
            raise ValueError(f"lever {self.name}: parts {unknown or '()'} are not step parts")


_FORWARD_AND_BACKWARD = ("forward", "backward")

#: Every lever, in the order ``--try all`` runs them.
LEVERS = MappingProxyType(
    {
        facts.name: facts
        for facts in (
            LeverFacts(
                AMP, "torch.autocast around the forward and loss", _FORWARD_AND_BACKWARD, AMP
            ),
            LeverFacts(
                CHANNELS_LAST,
                "channels_last memory format",
                _FORWARD_AND_BACKWARD,
                CHANNELS_LAST,
            ),
            # written as the optimizer's remedy, at the line that builds the optimizer
            LeverFacts(FOREACH, "the optimizer's multi-tensor step", ("optimizer",), "optimizer"),
            # fix writes torch threads from the loader doctor's sweep, not from this trial
            LeverFacts(THREADS, "torch threads", STEP_PARTS),
            # a larger batch changes the optimisation (the learning rate): advised, not written
            LeverFacts(BATCH_SIZE, "the DataLoader's batch size", STEP_PARTS),
            LeverFacts(COMPILE, "model.compile()", _FORWARD_AND_BACKWARD, COMPILE),
            # memory bought with time (the backward recomputes each block's forward): advised
            # with the memory it saves, not written
            LeverFacts(
                CHECKPOINT,
                "activation checkpointing of the blocks holding the most activations",
                _FORWARD_AND_BACKWARD,
                adds_at_most=("forward",),
            ),
        )
    }
)

#: ``--try``'s choices, in the order they run (``all``).
TRIAL_NAMES = tuple(LEVERS)
#: The levers ``torchdoctor fix`` writes into the code.
FIX_LEVERS = tuple(name for name, facts in LEVERS.items() if facts.fix_remedy is not None)
