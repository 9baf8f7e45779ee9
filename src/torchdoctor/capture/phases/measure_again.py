"""The script's steps again, right after the model-alone ones: the ceiling's second bracket.

Data made free is measured after the measured steps, so load that came or went between the two
would move the ceiling (the measured steps ÷ the model-alone ones). A few more of the script's
own steps right after the model-alone ones bracket them: ``analysis.verdict`` takes the ceiling's
interval over both brackets, so a ceiling the load moved reads as uncertain instead of firm.

With DataLoader workers the first steps after the model-alone ones find the batches the workers
prefetched meanwhile and barely wait: as many steps as the loader keeps ready (workers x
prefetch factor) are taken first and not kept.

Measured steps that took under half a second are too short for the CPU counters to tell how
busy the machine was (``system.others_cpu_cores``: the sampler then takes it over the run since
capture began); at this phase's end the window from their start, over the model-alone steps and
these, often is not, and the figure is taken over it, nearer the steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...record import phase_names
from .base import Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks

#: The bracket's steps: this share of ``--steps``, and at least :data:`MIN_STEPS`.
SHARE_OF_STEPS = 0.25
MIN_STEPS = 3


class MeasureAgainPhase(Phase):
    name = phase_names.MEASURE_AGAIN
    writes = ("measured_after", "system")
    reads = ("model_alone",)

    def __init__(self) -> None:
        super().__init__()
        self._skip = 0

    def wanted(self, session: PhaseSession) -> bool:
        if not session.data.model_alone:
            return False
        if session.loaders.main_dataset_key() in session.passes.without_workers:
            session.data.notes.append(
                "the script's steps after the model-alone ones were not measured: the loader's "
                "pass after the replayed one runs without its workers (docs/how-it-works.md)"
            )
            return False
        return True

    def start(self, session: PhaseSession) -> None:
        self._skip = prefetched(session.loaders.main_loader())

    def total(self, session: PhaseSession) -> int:
        return self._skip + max(MIN_STEPS, int(session.options.steps * SHARE_OF_STEPS))

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        if self.steps_done >= self._skip:
            session.data.measured_after.append(step)
        return super().on_step(session, step)

    def finish(self, session: PhaseSession) -> None:
        # Measured steps too short for the CPU counters told nothing of the machine's load:
        # from their start to here (both brackets and the model-alone steps) may be long enough.
        # (Until then the figure is the run's since capture began: a window farther from them.)
        system = session.data.system
        if system is not None and not system.cpu_percent_per_core:
            others, window = session.sampler.others_cores_since_start()
            if others is not None:
                system.others_cpu_cores, system.others_window_s = others, window


def prefetched(loader: object) -> int:
    """Batches a DataLoader keeps ready beyond the one asked for: workers x prefetch factor."""
    workers = getattr(loader, "num_workers", 0) or 0
    if workers <= 0:
        return 0
    return workers * (getattr(loader, "prefetch_factor", None) or 2)
