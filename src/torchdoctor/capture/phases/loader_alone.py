"""The loader alone: a clone of the script's DataLoader (same workers) iterated without the model.

Also where the script's loop ends for torchdoctor: its own DataLoader workers are stopped first,
so they do not compete with the clone (or with the doctor that follows) for cores.
"""

from __future__ import annotations

from ...loader import measure_loader_alone
from ...record import phase_names
from .base import Phase, PhaseSession


class LoaderAlonePhase(Phase):
    name = phase_names.LOADER_ALONE
    writes = ("loader_alone",)
    owns_loaders = True
    takes_steps = False
    agreed = False

    def start(self, session: PhaseSession) -> None:
        session.shutdown_workers()  # the script's own workers are idle now; free the cores
        if not session.options.counterfactuals:
            return
        loader = session.loaders.main_loader()
        if loader is None:
            return
        steps = session.options.steps
        session.progress(self.name, 0, steps)
        try:
            session.data.loader_alone = measure_loader_alone(loader, steps)
            session.progress(self.name, steps, steps)
        except Exception as exc:  # noqa: BLE001 - a failing clone must not lose the report
            session.data.notes.append(f"loader-alone phase failed: {type(exc).__name__}: {exc}")
