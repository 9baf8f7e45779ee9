"""A step part is one colour everywhere: the terminal's bar, the page's CSS and its chart.

Read off what each renderer draws, not off the table they share: a renderer that writes its own
colour for a part (as the page's CSS and the charts once did) fails here.
"""

from __future__ import annotations

import io
import re

from rich.console import Console

from torchdoctor.analysis.verdict import summarise
from torchdoctor.record import STEP_PARTS, RunRecord, StepSeries
from torchdoctor.record.part_names import PART_LABELS
from torchdoctor.report.html import render_html
from torchdoctor.report.terminal import render


def _record() -> RunRecord:
    """Three steps whose parts take a sixth each, so every part draws a bar."""
    steps = StepSeries()
    for _ in range(3):
        steps.add_step(dict.fromkeys(STEP_PARTS, 10.0), batches=1)
    record = RunRecord(command=["torchdoctor", "run", "--", "train.py"], steps=steps)
    summarise(record)
    return record


def _terminal_colours(record: RunRecord) -> dict[str, tuple[int, int, int]]:
    """Each part's bar colour in the breakdown table, as a 24-bit terminal receives it."""
    console = Console(width=160, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    render(record, console)
    found = {}
    for line in console.file.getvalue().splitlines():
        plain = re.sub(r"\x1b\[[0-9;]*m", "", line)
        part = next((p for p in STEP_PARTS if plain.strip("│ ").startswith(PART_LABELS[p])), None)
        bar = re.search(r"\x1b\[38;2;(\d+);(\d+);(\d+)m█", line)
        if part is not None and bar is not None:
            found[part] = tuple(int(x) for x in bar.groups())
    return found


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    value = hex_colour.lstrip("#")
    return tuple(int(value[i : i + 2], 16) for i in (0, 2, 4))


def _page_colours(page: str) -> dict[str, tuple[int, int, int]]:
    """Each part's fill in the page's step chart, resolved through the page's CSS variables."""
    css = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    light = re.search(r":root \{(.*?)\}", css, re.S).group(1)
    variables = dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", light))
    found = {}
    for fill, part in re.findall(r'fill="([^"]+)"><title>step 1: (\w+) ', page):
        name = re.fullmatch(r"var\(--([\w-]+)\)", fill)
        assert name is not None, f"{part}'s fill {fill} is not one of the page's colours"
        found[part] = _rgb(variables[name.group(1)])
    return found


def test_a_part_has_one_colour_in_the_terminal_the_css_and_the_chart():
    record = _record()
    terminal = _terminal_colours(record)
    page = _page_colours(render_html(record))
    assert set(terminal) == set(STEP_PARTS), terminal
    assert set(page) == set(STEP_PARTS), page
    assert terminal == page
    # Each part told apart from the others, in both.
    assert len(set(terminal.values())) == len(STEP_PARTS)
