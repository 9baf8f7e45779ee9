"""The loader doctor in one call: worker sweep, per-transform costs, memory, findings.

:func:`diagnose_loader` runs every loader measurement on a captured DataLoader (never iterating
the user's own object) and returns a :class:`LoaderDiagnosis` whose :meth:`~LoaderDiagnosis.to_extra`
goes into ``RunRecord.extra`` and whose findings go into ``RunRecord.findings``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from ..analysis.loader_memory import (
    CopyOnRead,
    LoaderMemory,
    copy_on_read_finding,
    describe_batch,
    detect_copy_on_read,
    dtype_advice,
    loader_memory,
)
from ..analysis.transforms import TransformCost, transform_findings
from ..analysis.worker_sweep import (
    PLATEAU_PATIENCE,
    SweepPoint,
    SweepPolicy,
    WorkerSweep,
    sweep_advice,
    sweep_candidates,
)
from ..record import Finding, LoaderSettings
from ._loaders import loader_settings
from .loader_costs import measure_getitem_costs
from .loader_sweep import sample_batch, sweep_loader
from .worker_memory import WorkerMemorySeries, sample_worker_memory

#: Counted batches per sweep setting, and the seconds each setting may take at most.
DEFAULT_BATCHES_PER_SETTING = 20
DEFAULT_BUDGET_S_PER_SETTING = 5.0

#: Batches and seconds of the pass that watches worker memory for copy-on-read.
DEFAULT_MEMORY_BATCHES = 400
DEFAULT_MEMORY_BUDGET_S = 10.0


@dataclass
class LoaderDiagnosis:
    """Everything the loader doctor measured, and what to change."""

    settings: LoaderSettings
    sweep: WorkerSweep | None = None
    transforms: list[TransformCost] = field(default_factory=list)
    memory: LoaderMemory | None = None
    copy_on_read: CopyOnRead | None = None
    worker_memory: WorkerMemorySeries | None = None
    findings: list[Finding] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_extra(self) -> dict[str, Any]:
        """JSON-ready entries for ``RunRecord.extra``.

        Keys: ``worker_sweep``, ``transforms`` (list of ``{name, share, ...}``),
        ``loader_memory``, ``copy_on_read``, ``worker_memory``, ``loader_doctor_s``.
        """
        asdict = dataclasses.asdict
        return {
            "worker_sweep": asdict(self.sweep) if self.sweep else None,
            "transforms": [asdict(t) for t in self.transforms],
            "loader_memory": asdict(self.memory) if self.memory else None,
            "copy_on_read": asdict(self.copy_on_read) if self.copy_on_read else None,
            "worker_memory": asdict(self.worker_memory) if self.worker_memory else None,
            "loader_doctor_s": dict(self.seconds),
        }


def available_cpus() -> int:
    """Logical CPUs this process may run on (its affinity mask, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def diagnose_loader(
    loader: Any,
    *,
    accelerator: bool,
    target_batches_per_s: float | None = None,
    sweep: bool = True,
    memory: bool = True,
    batches_per_setting: int = DEFAULT_BATCHES_PER_SETTING,
    budget_s_per_setting: float | None = DEFAULT_BUDGET_S_PER_SETTING,
    memory_batches: int = DEFAULT_MEMORY_BATCHES,
    memory_budget_s: float = DEFAULT_MEMORY_BUDGET_S,
    cpu_count: int | None = None,
    patience: int = PLATEAU_PATIENCE,
    on_progress: Callable[[str], None] | None = None,
) -> LoaderDiagnosis:
    """Measure a DataLoader without the model and say which settings to change.

    Args:
        loader: the user's DataLoader (copied, never iterated itself).
        accelerator: whether the model runs on a GPU/accelerator. On the CPU, workers compete
            with the model for cores, so the loader-alone sweep overstates what workers buy: pass
            ``sweep=False`` and run the whole-step sweep instead (see docs/loader.md).
        target_batches_per_s: batches per second the model consumes with free data (the
            model-alone phase), which stops the sweep once the loader outpaces the model.
        sweep: run the worker sweep.
        memory: watch worker memory for copy-on-read growth (a pass with workers).
        batches_per_setting: counted batches per sweep setting.
        budget_s_per_setting: cap on the counted seconds of each sweep setting.
        memory_batches: batches of the memory pass.
        memory_budget_s: cap on the seconds of the memory pass.
        cpu_count: logical CPUs (default: this process's affinity).
        patience: sweep settings in a row without gain before stopping (2 on a shared machine).
        on_progress: called with a short line before each measurement.

    Returns:
        The diagnosis; its findings carry the exact code of each fix.
    """
    say = on_progress or (lambda _line: None)
    settings = loader_settings(loader)
    diagnosis = LoaderDiagnosis(settings=settings)
    clock = time.perf_counter

    start = clock()
    say("loader: sampling a batch")
    batch = sample_batch(loader)
    leaves = describe_batch(batch) if batch is not None else []
    say("loader: timing __getitem__ and its transforms")
    diagnosis.transforms = measure_getitem_costs(loader)
    diagnosis.seconds["costs"] = clock() - start

    if sweep:
        start = clock()
        cpus = cpu_count or available_cpus()
        policy = SweepPolicy(
            sweep_candidates(cpus, loader.num_workers),
            target_batches_per_s=target_batches_per_s,
            patience=patience,
        )

        def progress(point: SweepPoint) -> None:
            say(f"loader: num_workers={point.num_workers}: {point.batches_per_s:.1f} batches/s")

        diagnosis.sweep = sweep_loader(
            loader,
            policy,
            batches_per_setting,
            budget_s_per_setting=budget_s_per_setting,
            on_point=progress,
        )
        diagnosis.seconds["sweep"] = clock() - start

    workers = diagnosis.sweep.best_workers if diagnosis.sweep else loader.num_workers
    if leaves:
        diagnosis.memory = loader_memory(leaves, workers, loader.prefetch_factor)

    if memory:
        start = clock()
        say("loader: watching worker memory")
        series = sample_worker_memory(
            loader,
            num_workers=max(1, workers),
            batches=memory_batches,
            budget_s=memory_budget_s,
        )
        diagnosis.worker_memory = series
        diagnosis.copy_on_read = detect_copy_on_read(series.uss_mb_per_worker)
        diagnosis.seconds["memory"] = clock() - start

    diagnosis.findings = loader_findings(diagnosis, accelerator=accelerator)
    return diagnosis


def loader_findings(diagnosis: LoaderDiagnosis, *, accelerator: bool) -> list[Finding]:
    """Every finding of a diagnosis, worker settings first."""
    findings: list[Finding] = []
    settings = diagnosis.settings
    if diagnosis.sweep is not None:
        batches_per_epoch = None
        if settings.dataset_len is not None and settings.batch_size:
            batches_per_epoch = -(-settings.dataset_len // settings.batch_size)
        findings += sweep_advice(
            diagnosis.sweep,
            settings,
            accelerator=accelerator,
            batches_per_epoch=batches_per_epoch,
            bytes_per_batch=diagnosis.memory.bytes_per_batch if diagnosis.memory else None,
            available_ram_bytes=psutil.virtual_memory().available,
        )
    findings += transform_findings(diagnosis.transforms)
    if diagnosis.memory is not None:
        findings += dtype_advice(diagnosis.memory.leaves, accelerator=accelerator)
    if diagnosis.copy_on_read is not None:
        workers = diagnosis.sweep.best_workers if diagnosis.sweep else settings.num_workers
        cow = copy_on_read_finding(diagnosis.copy_on_read, settings.dataset, max(1, workers))
        if cow is not None:
            findings.append(cow)
    return findings


__all__ = [
    "LoaderDiagnosis",
    "available_cpus",
    "diagnose_loader",
    "loader_findings",
    "loader_settings",
]
