"""The loader doctor in one call: worker sweep, per-transform costs, memory, findings.

:func:`diagnose_loader` runs every loader measurement on copies of a captured DataLoader (never
iterating the user's own object) and returns a :class:`LoaderDiagnosis`: its ``report`` is the
record's ``loader_report`` and its ``findings`` go into ``RunRecord.findings``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from ..record import Finding, LoaderReport, LoaderSettings, SweepPoint, WorkerSweep
from ._advice import sweep_advice
from ._children import sample_worker_memory
from ._clone import loader_settings, sample_batch
from ._costs import transform_findings
from ._measure import sweep_loader
from ._memory import (
    copy_on_read_finding,
    describe_batch,
    detect_copy_on_read,
    dtype_advice,
    loader_memory,
)
from ._policy import PLATEAU_PATIENCE, SweepPolicy, available_cpus, sweep_candidates
from ._transforms import measure_getitem_costs

#: Counted batches per sweep setting, and the seconds each setting may take at most.
DEFAULT_BATCHES_PER_SETTING = 20
DEFAULT_BUDGET_S_PER_SETTING = 5.0

#: Batches and seconds of the pass that watches worker memory for copy-on-read.
DEFAULT_MEMORY_BATCHES = 400
DEFAULT_MEMORY_BUDGET_S = 10.0


@dataclass
class LoaderDiagnosis:
    """Everything the loader doctor measured (``report``), and what to change (``findings``)."""

    settings: LoaderSettings
    report: LoaderReport = field(default_factory=LoaderReport)
    findings: list[Finding] = field(default_factory=list)


def diagnose_loader(
    loader: Any,
    *,
    accelerator: bool,
    target_batches_per_s: float | None = None,
    sweep: bool = True,
    worker_sweep: WorkerSweep | None = None,
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
            with the model for cores, so the loader-alone sweep overstates what workers buy:
            sweep whole training steps instead and pass the result as ``worker_sweep`` (see
            docs/loader.md).
        target_batches_per_s: batches per second the model consumes with free data (the
            model-alone phase), which stops the sweep once the loader outpaces the model.
        sweep: run the loader-alone worker sweep (unless ``worker_sweep`` is given).
        worker_sweep: a sweep already measured (the capture's whole-step sweep); the diagnosis
            uses it exactly as one of its own: memory, advice and the memory pass are for its
            pick.
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
    report = LoaderReport(worker_sweep=worker_sweep)
    clock = time.perf_counter

    start = clock()
    say("loader: sampling a batch")
    batch = sample_batch(loader)
    leaves = describe_batch(batch) if batch is not None else []
    say("loader: timing __getitem__ and its transforms")
    report.transforms = measure_getitem_costs(loader)
    report.seconds["costs"] = clock() - start

    if sweep and worker_sweep is None:
        start = clock()
        cpus = cpu_count or available_cpus()
        policy = SweepPolicy(
            sweep_candidates(cpus, loader.num_workers),
            target_batches_per_s=target_batches_per_s,
            patience=patience,
        )

        def progress(point: SweepPoint) -> None:
            say(f"loader: num_workers={point.num_workers}: {point.batches_per_s:.1f} batches/s")

        report.worker_sweep = sweep_loader(
            loader,
            policy,
            batches_per_setting,
            budget_s_per_setting=budget_s_per_setting,
            on_point=progress,
        )
        report.seconds["sweep"] = clock() - start

    workers = _workers(report, settings)
    if leaves:
        report.memory = loader_memory(leaves, workers, loader.prefetch_factor)

    if memory:
        start = clock()
        say("loader: watching worker memory")
        series = sample_worker_memory(
            loader,
            num_workers=max(1, workers),
            batches=memory_batches,
            budget_s=memory_budget_s,
        )
        report.worker_memory = series
        report.copy_on_read = detect_copy_on_read(series.uss_mb_per_worker)
        report.seconds["memory"] = clock() - start

    findings = loader_findings(report, settings, accelerator=accelerator)
    return LoaderDiagnosis(settings=settings, report=report, findings=findings)


def loader_findings(
    report: LoaderReport, settings: LoaderSettings, *, accelerator: bool
) -> list[Finding]:
    """Every finding of a loader report, worker settings first.

    Args:
        report: what the loader doctor measured.
        settings: the DataLoader's settings now.
        accelerator: whether the model runs on a GPU/accelerator.
    """
    findings: list[Finding] = []
    if report.worker_sweep is not None:
        batches_per_epoch = None
        if settings.dataset_len is not None and settings.batch_size:
            batches_per_epoch = -(-settings.dataset_len // settings.batch_size)
        findings += sweep_advice(
            report.worker_sweep,
            settings,
            accelerator=accelerator,
            batches_per_epoch=batches_per_epoch,
            bytes_per_batch=report.memory.bytes_per_batch if report.memory else None,
            available_ram_bytes=psutil.virtual_memory().available,
        )
    findings += transform_findings(report.transforms)
    if report.memory is not None:
        findings += dtype_advice(report.memory.leaves, accelerator=accelerator)
    if report.copy_on_read is not None:
        workers = max(1, _workers(report, settings))
        cow = copy_on_read_finding(report.copy_on_read, settings.dataset, workers)
        if cow is not None:
            findings.append(cow)
    return findings


def _workers(report: LoaderReport, settings: LoaderSettings) -> int:
    """The worker count the advice is for: the sweep's pick, else the loader's own."""
    return report.worker_sweep.best_workers if report.worker_sweep else settings.num_workers


__all__ = [
    "DEFAULT_BATCHES_PER_SETTING",
    "DEFAULT_BUDGET_S_PER_SETTING",
    "DEFAULT_MEMORY_BATCHES",
    "DEFAULT_MEMORY_BUDGET_S",
    "LoaderDiagnosis",
    "diagnose_loader",
    "loader_findings",
]
