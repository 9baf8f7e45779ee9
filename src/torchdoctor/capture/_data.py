"""What a capture measured, in a plain holder apart from the hooks that measure it.

The phases write here; the runner builds the record from here. Nothing in it refers back to the
session, so it can be handed on (to a record builder today; to a supervising process or another
rank later) without dragging the live hooks along.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..record import Finding, LoaderAlone, MemoryCourse, MemorySplit, SystemUsage, WorkerSweep
from ._loop_shapes import Evaluations

if TYPE_CHECKING:
    from ..loader import LoaderDiagnosis


class StepMarks(NamedTuple):
    """One training step as the timeline cut it, and the batches it drew."""

    marks: list[Any]
    batches: int


def _seen() -> dict[str, int]:
    return {
        "dataloaders": 0,
        "dataloader_iterators": 0,
        "batches": 0,
        "optimizers": 0,
        "optimizer_steps": 0,
        "forward_calls": 0,
        "backward_calls": 0,
    }


@dataclass
class CaptureData:
    """Every result of the live capture, filled phase by phase."""

    measured: list[StepMarks] = field(default_factory=list)
    model_alone: list[StepMarks] = field(default_factory=list)
    #: The script's steps again, right after the model-alone ones (the ceiling's second bracket).
    measured_after: list[StepMarks] = field(default_factory=list)
    #: Steps under DDP's ``no_sync()`` (communication made free).
    no_sync: list[StepMarks] = field(default_factory=list)
    #: Per no-sync step, ms in the script's collectives that could not return at once (an
    #: all-gather whose output it reads): they ran for real, and are taken out of the step.
    no_sync_collectives_ms: list[float] = field(default_factory=list)
    #: Values of the first tensors ``backward`` was called on (``options.loss_values``).
    losses: list[float] = field(default_factory=list)
    #: torchdoctor's own work in its hooks during the measured steps (ns), and those steps.
    capture_cost_ns: int = 0
    capture_cost_steps: int = 0
    #: The same after ``run --whole``'s measured steps (its lean hooks), to the end.
    watch_cost_ns: int = 0
    watch_cost_steps: int = 0
    #: Wall time of each step watched by the sync finder (not timed otherwise), in ms.
    sync_sample_ms: list[float] = field(default_factory=list)
    sync_findings: list[Finding] = field(default_factory=list)
    #: One watched step's memory by kind (``_memory_split.MemoryWatch``).
    memory_split: MemorySplit | None = None
    #: Variables that keep every step's autograd graph (``_kept_graphs.KeptGraphs``).
    memory_findings: list[Finding] = field(default_factory=list)
    #: The memory in use at the measured steps' start, middle and end
    #: (``_memory_course.MemoryCourseReader``).
    memory_course: MemoryCourse | None = None
    #: The data-parallel wrappers' findings and DDP's settings, noted after the measured steps.
    parallel_findings: list[Finding] = field(default_factory=list)
    ddp_settings: dict[str, Any] = field(default_factory=dict)
    #: What the loop itself does wrong (a loop whose parameters never change).
    loop_findings: list[Finding] = field(default_factory=list)
    #: Each place that evaluated inside the steps: its time and steps (``_loop_shapes``).
    evaluations: Evaluations = field(default_factory=lambda: Evaluations())
    trace_paths: list[str] = field(default_factory=list)
    #: The whole-step worker sweep's result (``record.WorkerSweep``), when it ran.
    worker_sweep: WorkerSweep | None = None
    loader_alone: LoaderAlone | None = None
    #: The loader doctor's result (``loader.LoaderDiagnosis``), when it ran.
    loader_diagnosis: LoaderDiagnosis | None = None
    system: SystemUsage | None = None
    notes: list[str] = field(default_factory=list)
    #: What the capture saw: counts of loaders, optimizers, steps, module calls.
    seen: dict[str, int] = field(default_factory=_seen)
    #: ``--try``: each lever setting's steps (``phases.trials.TrialRun``), in the order run.
    trials: list[Any] = field(default_factory=list)
    #: One step's FLOPs, parameters, dtype and the measured matmul peak (``phases.flops``).
    flops: dict[str, Any] | None = None
    #: torchdoctor's own failure, when it stopped the script because of one.
    internal_error: Exception | None = None

    def add_cost(self, ns: int, steps: int, watched: bool) -> None:
        """What capture cost ``steps`` steps, measured (or, ``watched``, watched by ``run
        --whole`` after its measured steps)."""
        if watched:
            self.watch_cost_ns += ns
            self.watch_cost_steps += steps
        else:
            self.capture_cost_ns += ns
            self.capture_cost_steps += steps

    def overheads_ms(self) -> dict[str, float]:
        """What measuring cost, for the record's ``overhead_ms``: torchdoctor's own work in its
        hooks per measured (and per watched) step, and the step while the sync finder watched
        (median)."""
        out = {}
        if self.capture_cost_steps:
            out["capture_per_step_ms"] = round(
                self.capture_cost_ns / 1e6 / self.capture_cost_steps, 4
            )
        if self.watch_cost_steps:
            out["watch_per_step_ms"] = round(self.watch_cost_ns / 1e6 / self.watch_cost_steps, 4)
        if self.sync_sample_ms:
            out["sync_sampled_step_ms"] = round(statistics.median(self.sync_sample_ms), 3)
        return out
