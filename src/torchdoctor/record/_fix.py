"""The ``--fix`` trial in the record: what was injected, what was predicted, what the re-run gave.

Produced by :func:`torchdoctor.loader.fix_trial` and saved in ``RunRecord.fix`` (schema 1:
``extra["fix"]``, same keys). ``after`` is the re-run's whole record, so a saved trial can be
checked step by step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._judged import JudgedSpeedup

if TYPE_CHECKING:
    # ``after`` is a whole RunRecord, which holds a FixTrial: the loader resolves the name from
    # the record it is rebuilding (``_serial.build``'s ``root``), so no import runs in a circle.
    from ._run import RunRecord


@dataclass
class FixTrial:
    """A re-run of the script with the advised DataLoader settings injected (no code edited)."""

    #: The DataLoader arguments injected (``{"num_workers": 4, "persistent_workers": True}``).
    overrides: dict[str, Any] = field(default_factory=dict)
    #: What the worker sweep predicts for the whole step (capped by the measured ceiling).
    predicted_speedup: float | None = None
    #: Where the script builds the DataLoader (``file:line``), when seen.
    where: str | None = None
    #: The change that makes the fix permanent: ``DataLoader(..., num_workers=4)``.
    code: str | None = None
    #: Mean step of the fixed re-runs, in ms (every step of every round).
    after_step_ms: float | None = None
    #: Mean step of the re-runs of the script as it is, alternated with the fixed ones, in ms.
    before_step_ms: float | None = None
    #: The fix as verified: mean step before over mean step after (a throughput ratio), its
    #: 90% bootstrap interval from the two sides' steps, how much faster every pair must show
    #: it (``compare``'s run-to-run allowance), and the judgement, as ``compare`` judges. An
    #: older record's, verified before re-runs were judged, has no interval nor allowance.
    verified: JudgedSpeedup | None = None
    #: Each pair of re-runs' own speedup (the original's mean step ÷ the fixed one's).
    pairs: list[float] = field(default_factory=list)
    #: Pairs of re-runs measured (original, then fixed).
    rounds: int = 0
    #: ``torch.set_num_threads(threads)`` injected at the start of the re-run (the sweep's pick
    #: changed the main process's threads); ``None``: the script's own thread count.
    threads: int | None = None
    #: The re-run's whole record; ``None`` when there was nothing to inject.
    after: RunRecord | None = None
