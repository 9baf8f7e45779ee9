"""Measured trials (``run --try``) and the step's arithmetic (FLOPs, utilisation); docs/trials.md.

Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._judged import JudgedSpeedup
from ._stats import Stat


@dataclass
class TrialPoint:
    """One setting of a trial that tries several (batch sizes, thread counts)."""

    setting: str
    step_ms: Stat | None = None
    #: Samples per second at this setting (batch size × batches per step ÷ step time).
    samples_per_s: float | None = None
    #: Peak memory at this setting: the device's ``max_memory_allocated``, or the process's RSS.
    memory_mb: float | None = None


@dataclass
class Trial:
    """One lever tried in the script's own loop, measured against its measured steps."""

    name: str
    #: What was changed, in words.
    changed: str
    #: ``"measured"``, ``"skipped"`` (does not apply here: ``reason``) or ``"failed"``.
    status: str = "measured"
    reason: str = ""
    #: The trial's measured steps (ms), after its own warm-up.
    steps: list[float] = field(default_factory=list)
    step_ms: Stat | None = None
    #: The trial's warm-up steps (ms): a compile's time shows here, apart from the step time.
    warmup_ms: list[float] = field(default_factory=list)
    #: The baseline's median step ÷ the trial's (samples/s ratio for ``batch-size``), its 90%
    #: bootstrap interval from the per-step times, the allowance it had to clear, and the
    #: judgement (``worth it`` when IMPROVED); ``None`` when nothing was measured.
    judged: JudgedSpeedup | None = None
    #: The setting picked, for trials that try several.
    pick: str | None = None
    points: list[TrialPoint] = field(default_factory=list)
    #: The code to paste.
    code: str = ""
    #: What else changes (numerics, learning rate, memory).
    caveats: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Flops:
    """The step's arithmetic and how much of the device's peak it reaches."""

    #: FLOPs of one step, counted by ``torch.utils.flop_counter.FlopCounterMode``.
    per_step: float
    #: Parameters of the outermost modules.
    params: int | None = None
    #: ``per_step`` ÷ the mean measured step.
    achieved_flops_per_s: float | None = None
    peak_flops_per_s: float | None = None
    #: How the peak was obtained: ``"table: <device> <dtype>"`` or ``"measured: <matmul> ..."``.
    peak_source: str = ""
    #: ``achieved ÷ peak`` (0..1); a lower bound when ``partial``.
    utilisation: float | None = None
    dtype: str = ""
    #: Ops with arithmetic the counter has no formula for (recurrent layers, extensions'
    #: ops): ``[{"op", "share", "recurrent"}]``, share of the step's op time (``None`` on an
    #: accelerator).
    uncounted: list[dict[str, Any]] = field(default_factory=list)
    #: The count misses arithmetic that matters (:data:`analysis.trials.UNCOUNTED_SHARE`).
    partial: bool = False
