"""Data made free: the same loop, fed batches already in memory instead of the DataLoader's.

The script's own step runs unchanged; only the loader's iterator returns kept batches (see
``ReplayStore``), or, in a loop that builds its batches itself, the functions that build them
return results they returned before (see ``_inputs``). The difference to the measured steps is
what input costs the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...record import phase_names
from .base import NOT_SERVED, Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks


class ModelAlonePhase(Phase):
    name = phase_names.MODEL_ALONE
    writes = ("model_alone",)

    def wanted(self, session: PhaseSession) -> bool:
        if not session.options.counterfactuals:
            return False
        main = session.loaders.main_dataset_key()
        if main is None:
            if session.inputs.start_replay():
                return True
            session.data.notes.append(
                "model-alone phase skipped: the loop does not draw batches from a DataLoader "
                "nor from a function of its own that torchdoctor could replay (time outside "
                "forward/backward/optimizer is input or host work)"
            )
            return False
        if not session.replay.start(main):
            session.data.notes.append(
                "model-alone phase skipped: batches too large to keep in memory"
            )
            return False
        return True

    def total(self, session: PhaseSession) -> int:
        return session.options.steps

    def start(self, session: PhaseSession) -> None:
        session.main_dataset = session.loaders.main_dataset_key()

    def next_batch(self, session: PhaseSession, dataset_key: int):
        if dataset_key != session.main_dataset:
            return NOT_SERVED
        batch = session.replay.next()
        return NOT_SERVED if batch is None else batch

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        session.data.model_alone.append(step)
        return super().on_step(session, step)

    def close(self, session: PhaseSession) -> None:
        session.inputs.stop_replay()
