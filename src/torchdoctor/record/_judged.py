"""A speedup as judged against the noise: the one value ``compare``, ``run --try``, ``--fix``
and ``torchdoctor fix`` each produce, and the one rule and words for its judgement.

A change counts only when its interval clears 1 **and** its speedup clears the allowance (how
far two runs of one script may differ here) the same way; otherwise it is no clear change
(:func:`judged_speedup`; docs/report.md). Renderers take a judgement's words and tone from
:data:`JUDGEMENT_WORDS` and :data:`JUDGEMENT_TONES`, so a judgement added here (one entry in
:data:`JudgementWord` and in each table) reaches every report. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

#: What a speedup was judged: as ``compare`` prints it, and as the saved record spells it.
JudgementWord = Literal["IMPROVED", "NO CHANGE", "REGRESSED", "UNCLEAR"]
IMPROVED: JudgementWord = "IMPROVED"
NO_CHANGE: JudgementWord = "NO CHANGE"
REGRESSED: JudgementWord = "REGRESSED"
#: A figure that cannot be the change's: outside what the parts it changes allow (the load
#: changed while it was measured; ``analysis.lever_bounds``). Its ``why`` says which bound.
UNCLEAR: JudgementWord = "UNCLEAR"
JUDGEMENTS: tuple[JudgementWord, ...] = (IMPROVED, NO_CHANGE, REGRESSED, UNCLEAR)

#: Each judgement said of a lever or a remedy tried ("worth it") rather than of two runs.
JUDGEMENT_WORDS = MappingProxyType(
    {
        IMPROVED: "worth it",
        NO_CHANGE: "no clear gain",
        REGRESSED: "slower",
        UNCLEAR: "could not tell",
    }
)
#: Each judgement's tone in a report: ``good``, ``bad`` or plain (``""``).
JUDGEMENT_TONES = MappingProxyType({IMPROVED: "good", NO_CHANGE: "", REGRESSED: "bad", UNCLEAR: ""})


@dataclass(frozen=True)
class JudgedSpeedup:
    """A speedup, its 90% interval, the allowance it had to clear, and the judgement.

    Attributes:
        speedup: the baseline's step ÷ the change's (a throughput ratio; > 1 is faster).
        low: the interval's low end (``None``: too few steps for one).
        high: the interval's high end.
        allowance: the change two runs of one script may show here, which the speedup must
            clear (``None`` where an older record did not keep it).
        judgement: what it was judged (:func:`judged_speedup`).
        why: for an :data:`UNCLEAR` figure, the bound it broke, in words (else ``""``).
        as_timed: where the pairs of runs it was judged on were corrected for the load each
            run saw (``torchdoctor fix``'s rounds, by the parts its lever leaves alone:
            ``analysis.lever_bounds``), each pair's speedup as timed; ``None`` otherwise.
    """

    speedup: float
    low: float | None = None
    high: float | None = None
    allowance: float | None = None
    judgement: JudgementWord = NO_CHANGE
    why: str = ""
    as_timed: list[float] | None = field(default=None, hash=False)

    @property
    def interval(self) -> tuple[float, float] | None:
        """``(low, high)``, or ``None`` without an interval."""
        if self.low is None or self.high is None:
            return None
        return self.low, self.high

    @property
    def word(self) -> str:
        """The judgement said of a lever or a remedy: ``worth it``, ``no clear gain``, ``slower``,
        ``could not tell``."""
        return JUDGEMENT_WORDS[self.judgement]

    @property
    def tone(self) -> str:
        """``good``, ``bad`` or ``""``: how a report colours the judgement."""
        return JUDGEMENT_TONES[self.judgement]

    def interval_words(self, dash: str = "-") -> str:
        """``1.20-1.40`` (``""`` without an interval)."""
        if self.interval is None:
            return ""
        return f"{self.low:.2f}{dash}{self.high:.2f}"

    def as_timed_words(self) -> str:
        """``its rounds read against the load each run saw (as timed: 1.11x, 3.18x)`` for a
        figure judged on corrected pairs, else ``""``."""
        if not self.as_timed:
            return ""
        timed = ", ".join(f"{x:.2f}x" for x in self.as_timed)
        return f"its rounds read against the load each run saw (as timed: {timed})"

    def figure(self, dash: str = "-", brackets: str = "[]") -> str:
        """``1.30x [1.20-1.40]``: the speedup and its interval."""
        inner = self.interval_words(dash)
        return f"{self.speedup:.2f}x" + (f" {brackets[0]}{inner}{brackets[1]}" if inner else "")


def judged_speedup(
    speedup: float,
    low: float | None,
    high: float | None,
    allowance: float,
    faster: bool = True,
    slower: bool = True,
) -> JudgedSpeedup:
    """Judge a speedup (the rule in the module's docstring).

    ``faster`` and ``slower`` are further evidence that must agree (runs taken in pairs: every
    pair beyond the allowance); without an interval nothing is judged a change.
    """
    judgement = NO_CHANGE
    if low is not None and high is not None:
        if low > 1.0 and speedup >= 1.0 + allowance and faster:
            judgement = IMPROVED
        elif high < 1.0 and speedup <= 1.0 / (1.0 + allowance) and slower:
            judgement = REGRESSED
    return JudgedSpeedup(speedup, low, high, allowance, judgement)
