"""The whole-step worker sweep: the script trains on batches from clones with k workers.

Runs only for a CPU model whose measured steps look input-bound: there the workers compete with
the model for cores, so the loader alone overstates what more workers buy, and the model's own
intra-op threads compete with the workers: the worker count is searched together with
``torch.get_num_threads()`` (docs/loader.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ...loader import WorkerThreadPolicy, available_cpus, sweep_candidates
from ...record import phase_names
from .._inloop_sweep import InLoopSweep
from .base import NOT_SERVED, Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks

#: Counted steps per setting of the whole-step worker sweep (after its warm steps).
SWEEP_MAX_STEPS_PER_SETTING = 8


class WorkerSweepPhase(Phase):
    name = phase_names.WORKER_SWEEP
    writes = ("worker_sweep",)
    reads = ("measured", "model_alone")
    owns_loaders = True

    def __init__(self) -> None:
        super().__init__()
        self._sweep: InLoopSweep | None = None
        self._candidates = 0

    def wanted(self, session: PhaseSession) -> bool:
        if session.ranks.launched:
            return False  # its steps per setting adapt to each rank's own figures
        return (
            bool(session.data.model_alone)
            and not session.clock.on_accelerator
            and session.wants_loader_doctor()
        )

    def total(self, session: PhaseSession) -> int:
        return self._candidates

    def start(self, session: PhaseSession) -> None:
        loader = session.loaders.main_loader()
        session.shutdown_workers()  # the script's own workers would compete with the clones
        cpus = available_cpus()
        measured = session.measured_series()
        measured_ms = sum(measured.step_ms)
        policy = WorkerThreadPolicy(
            sweep_candidates(cpus, loader.num_workers),
            cpu_count=cpus,
            default_threads=torch.get_num_threads(),
            current_workers=loader.num_workers,
            # The script as it is was just measured: the baseline of the speedup.
            baseline_batches_per_s=(
                1000.0 * sum(measured.batches) / measured_ms if measured_ms > 0 else None
            ),
        )
        # The probe and the path's worker counts; the count grows if the search goes on.
        self._candidates = len(policy.candidates) + 2
        self._sweep = InLoopSweep(
            loader,
            policy,
            steps_per_setting=min(session.options.steps, SWEEP_MAX_STEPS_PER_SETTING),
            patcher=session.patcher.child(),
            clock_ns=session.clock_ns,
            on_point=lambda workers, threads, rate: session.progress(
                self.name, len(policy.points), max(self._candidates, len(policy.points))
            ),
        )
        session.progress(self.name, 0, self._candidates)
        self._sweep.start()

    def next_batch(self, session: PhaseSession, dataset_key: int):
        if self._sweep is None or dataset_key != session.main_dataset:
            return NOT_SERVED
        session.push("data_wait")
        try:
            return self._sweep.next_batch(session.original_next)
        finally:
            session.pop("data_wait")

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        if self._sweep is None:
            return True
        step_ms = session.step_ms(step)
        if not self._sweep.on_step_end(step_ms, step.batches):
            return False
        session.data.worker_sweep = self._sweep.result()
        return True

    def finish(self, session: PhaseSession) -> None:
        self.close(session)

    def close(self, session: PhaseSession) -> None:
        sweep, self._sweep = self._sweep, None
        if sweep is not None:
            sweep.close()
