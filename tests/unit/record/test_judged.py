"""One judged speedup: the rule every judgement follows (``compare``, trials, ``--fix``, ``fix``)
and its words, from one place."""

from __future__ import annotations

import typing

import pytest

from torchdoctor.record import (
    IMPROVED,
    JUDGEMENT_TONES,
    JUDGEMENT_WORDS,
    JUDGEMENTS,
    NO_CHANGE,
    REGRESSED,
    JudgedSpeedup,
    JudgementWord,
    judged_speedup,
)


@pytest.mark.parametrize(
    "speedup, low, high, allowance, expected",
    [
        (1.5, 1.4, 1.6, 0.1, IMPROVED),
        (1.05, 1.02, 1.08, 0.1, NO_CHANGE),  # beyond the steps' noise, within the allowance
        (1.5, 0.9, 2.1, 0.1, NO_CHANGE),  # the interval holds 1
        (1.1, 1.05, 1.15, 0.1, IMPROVED),  # the allowance is cleared at its edge
        (0.5, 0.4, 0.6, 0.1, REGRESSED),
        (0.95, 0.92, 0.98, 0.1, NO_CHANGE),
        (1.5, None, None, 0.1, NO_CHANGE),  # too few steps for an interval: nothing is judged
    ],
)
def test_a_change_clears_both_the_interval_and_the_allowance(
    speedup, low, high, allowance, expected
):
    judged = judged_speedup(speedup, low, high, allowance)
    assert judged == JudgedSpeedup(speedup, low, high, allowance, expected)


def test_further_evidence_must_agree_for_a_change():
    assert judged_speedup(1.5, 1.4, 1.6, 0.1, faster=False).judgement == NO_CHANGE
    assert judged_speedup(0.5, 0.4, 0.6, 0.1, slower=False).judgement == NO_CHANGE
    assert judged_speedup(1.5, 1.4, 1.6, 0.1, slower=False).judgement == IMPROVED


def test_every_judgement_has_its_words_and_tone():
    assert set(typing.get_args(JudgementWord)) == set(JUDGEMENTS)
    assert set(JUDGEMENT_WORDS) == set(JUDGEMENT_TONES) == set(JUDGEMENTS)
    assert [JUDGEMENT_WORDS[j] for j in JUDGEMENTS] == [
        "worth it",
        "no clear gain",
        "slower",
        "could not tell",
    ]
    assert [JUDGEMENT_TONES[j] for j in JUDGEMENTS] == ["good", "", "bad", ""]


def test_a_judged_speedup_in_words():
    judged = JudgedSpeedup(1.3, 1.2, 1.4, 0.1, IMPROVED)
    assert judged.figure() == "1.30x [1.20-1.40]"
    assert judged.figure("–", "()") == "1.30x (1.20–1.40)"
    assert (judged.word, judged.tone, judged.interval) == ("worth it", "good", (1.2, 1.4))
    alone = JudgedSpeedup(1.3)
    assert alone.figure() == "1.30x" and alone.interval_words() == "" and alone.interval is None
    assert alone.word == "no clear gain"
