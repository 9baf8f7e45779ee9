"""The verdict: what bounds a run, shared by the run record and the trace report.

It lives apart from :mod:`._run` so that :mod:`._trace` (whose report keeps the trace's own
verdict) and :mod:`._run` (whose record holds a trace report) need not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._kinds import VerdictKind


@dataclass
class Verdict:
    """What bounds the run, in the user's words."""

    kind: VerdictKind
    why: str
    next: str
    #: Share of the median step spent in each group: input, compute, host.
    shares: dict[str, float] = field(default_factory=dict)
    #: False when the load on a busy machine could have flipped it (``analysis.firmness``): its
    #: ``why`` then says why, and ``candidates`` lists the kinds it could be (its own first).
    firm: bool = True
    candidates: list[str] = field(default_factory=list)
