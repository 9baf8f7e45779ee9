"""One vocabulary: the capture's phases (record.phase_names) and a step's parts
(record.part_names) are named once, and everything that speaks of them has words for each."""

from __future__ import annotations

import io

from rich.console import Console

from torchdoctor.analysis.job_findings import part_bound
from torchdoctor.analysis.verdict import GROUPS
from torchdoctor.capture.phases import PHASES, WHOLE_PHASES
from torchdoctor.record import HOST_BOUND, INPUT_BOUND, part_names, phase_names
from torchdoctor.report.progress import ProgressDisplay


def test_the_phase_table_and_the_words_name_the_same_phases_in_the_same_order():
    tables = [*PHASES, *WHOLE_PHASES]  # a run's table, then run --whole's
    assert [phase.name for phase in tables] == list(phase_names.PHASE_WORDS)


def test_the_progress_display_has_words_for_every_phase(capsys):
    display = ProgressDisplay(console=Console(file=io.StringIO()))  # not a terminal: lines
    with display:
        for phase in (*PHASES, *WHOLE_PHASES):
            display.update(phase.name, 0, 4)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"torchdoctor: {words} (4 steps)" for words in phase_names.PHASE_WORDS.values()
    ]


def test_every_table_of_step_parts_names_every_part():
    tables = {
        "PART_LABELS": part_names.PART_LABELS,
        "PART_HEADERS": part_names.PART_HEADERS,
        "PART_WORDS": part_names.PART_WORDS,
        "PART_GROUPS": part_names.PART_GROUPS,
    }
    for name, table in tables.items():
        assert tuple(table) == part_names.STEP_PARTS, name


def test_the_verdict_groups_and_a_stragglers_bound_come_from_the_parts_groups():
    grouped = [part for parts in GROUPS.values() for part in parts]
    assert sorted(grouped) == sorted(part_names.STEP_PARTS)  # each part in one group
    assert GROUPS["input"] == ("data_wait", "to_device")
    assert part_bound("data_wait") == INPUT_BOUND and part_bound("other") == HOST_BOUND


def test_every_status_has_one_exit_status_a_look_and_words():
    from torchdoctor.analysis.short_run import _TOO_FEW_NEXT
    from torchdoctor.process.ending import EXIT_FOR
    from torchdoctor.record import COMPLETE, ENDED_SHORT, STATUS_PRECEDENCE, STATUSES, RunRecord
    from torchdoctor.report._style import ENDINGS
    from torchdoctor.report.terminal import stop_line

    assert set(EXIT_FOR) == set(STATUSES)
    ended_badly = set(STATUSES) - {COMPLETE}
    assert set(ENDINGS) == ended_badly
    # every status has one place in the precedence, the worst first and a completed run last
    assert sorted(STATUS_PRECEDENCE) == sorted(STATUSES) and STATUS_PRECEDENCE[-1] == COMPLETE
    assert set(_TOO_FEW_NEXT) == set(ENDED_SHORT)  # a short run's verdict says what to do next
    for status in STATUSES:
        words = stop_line(RunRecord(status=status))
        assert words and words != status, f"no words for the status {status!r}"


def test_each_status_word_is_spelled_in_at_most_two_files():
    """Code names a status by its constant (record/_kinds.py): a word spelled again elsewhere is
    a second place that decides, or reads, how a run ended."""
    import re
    from pathlib import Path

    import torchdoctor
    from torchdoctor.record import STATUSES

    src = Path(torchdoctor.__file__).parent
    texts = {p: p.read_text(encoding="utf-8") for p in src.rglob("*.py")}
    for status in STATUSES:
        quoted = re.compile(rf"[\"']{re.escape(status)}[\"']")
        spelled = sorted(
            str(p.relative_to(src)) for p, text in texts.items() if quoted.search(text)
        )
        assert len(spelled) <= 2, f"{status!r} is spelled in {spelled}"
