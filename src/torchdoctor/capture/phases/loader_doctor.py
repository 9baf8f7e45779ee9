"""The loader doctor: transform costs, batch memory and (without the in-loop sweep) a loader-only
worker sweep, run on clones of the script's DataLoader once its loop has been stopped."""

from __future__ import annotations

import statistics

from ...loader import diagnose_loader
from ...record import phase_names
from .base import Phase, PhaseSession


class LoaderDoctorPhase(Phase):
    name = phase_names.LOADER_DOCTOR
    writes = ("loader_diagnosis",)
    reads = ("measured", "model_alone", "worker_sweep")
    owns_loaders = True
    takes_steps = False
    agreed = False

    def wanted(self, session: PhaseSession) -> bool:
        if session.loaders.main_loader() is None:
            return False
        return session.data.worker_sweep is not None or (
            session.options.counterfactuals and session.wants_loader_doctor()
        )

    def start(self, session: PhaseSession) -> None:
        loader = session.loaders.main_loader()
        accelerator = session.clock.on_accelerator
        sweep = session.data.worker_sweep
        needed = None
        model_alone = session.model_alone_step_ms()
        if model_alone:
            batches_per_step = session.measured_batches_per_step() or 1.0
            needed = batches_per_step * 1000.0 / statistics.mean(model_alone)
        session.progress(self.name, 0, 1)
        try:
            # One call: a whole-step sweep measured in the loop is used as the doctor's own.
            session.data.loader_diagnosis = diagnose_loader(
                loader, accelerator=accelerator, target_batches_per_s=needed, worker_sweep=sweep
            )
        except Exception as exc:  # noqa: BLE001 - the doctor's failure must not lose the run
            session.data.notes.append(f"loader doctor failed: {type(exc).__name__}: {exc}")
        session.progress(self.name, 1, 1)
