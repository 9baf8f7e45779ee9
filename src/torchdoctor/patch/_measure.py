"""Each remedy measured on the patched code: alternated runs, judged as ``compare`` judges.

Variants: the original script, each remedy's patch alone (when there are several) and the whole
patch. Each round runs every variant once, in turn; the next round runs them in the reverse order
(ABBA), so a drift of the machine's load falls on both sides. Each variant's steps from every
round are pooled and judged against the original's by
:func:`torchdoctor.analysis.compare.judge` (a bootstrap interval and the run-to-run allowance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..analysis.compare import Judgement, judge, step_times
from ..record import RunRecord

#: ``run(overrides, label)``: the script run once with ``overrides`` (original path → patched
#: file) and measured; its record. ``label`` says what is run, for the progress line.
RunVariant = Callable[[Mapping[str, str], str], RunRecord]


@dataclass
class Variant:
    """One version of the script and its pooled measured steps."""

    name: str
    remedies: frozenset[str]
    overrides: Mapping[str, str]
    steps: list[float] = field(default_factory=list)
    #: How runs of it failed (the script raised, no step measured), in words.
    failures: list[str] = field(default_factory=list)
    #: Ctrl-C or SIGTERM ended one of its runs: measuring stops.
    interrupted: bool = False


def alternate(variants: Sequence[Variant], run: RunVariant, rounds: int) -> bool:
    """Run every variant ``rounds`` times, alternating; returns False when interrupted."""
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for v in order:
            record = run(v.overrides, f"round {r + 1}/{rounds} · {v.name}")
            if record.status == "interrupted":
                v.interrupted = True
                return False
            steps = step_times(record)
            if record.status != "complete" or len(steps) < 2:
                v.failures.append(_failure(record))
            else:
                v.steps.extend(steps)
    return True


def _failure(record: RunRecord) -> str:
    note = next((n for n in record.notes if n), "")
    what = f"ended {record.status}" if record.status != "complete" else "measured no step"
    return f"{what}: {note}" if note else what


def judged(original: Variant, variant: Variant) -> Judgement | None:
    """``variant`` against ``original``, or ``None`` when either has too few steps."""
    if len(original.steps) < 2 or len(variant.steps) < 2 or variant.failures:
        return None
    return judge(original.steps, variant.steps)
