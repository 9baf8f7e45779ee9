"""One vocabulary: the capture's phases are named once (record.phase_names), and everything that
speaks of a phase (the progress display) has words for every one of them."""

from __future__ import annotations

import io

from rich.console import Console

from torchdoctor.capture.phases import PHASES
from torchdoctor.record import phase_names
from torchdoctor.report.progress import ProgressDisplay


def test_the_phase_table_and_the_words_name_the_same_phases_in_the_same_order():
    assert [phase.name for phase in PHASES] == list(phase_names.PHASE_WORDS)


def test_the_progress_display_has_words_for_every_phase(capsys):
    display = ProgressDisplay(console=Console(file=io.StringIO()))  # not a terminal: lines
    with display:
        for phase in PHASES:
            display.update(phase.name, 0, 4)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"torchdoctor: {words} (4 steps)" for words in phase_names.PHASE_WORDS.values()
    ]
