"""The terminal report and the page say the same things in the same words where both say them.

The page's environment table had drifted from the terminal's (no physical cores, no loader
settings beyond four, no CPU or memory rows): read off both renderings, not off the words
module they now share.
"""

from __future__ import annotations

import html
import io
import re

from rich.console import Console

from paths import DATA
from torchdoctor.record import RunRecord
from torchdoctor.report.html import render_html
from torchdoctor.report.terminal import render


def _terminal_environment(record: RunRecord) -> dict[str, str]:
    console = Console(width=1000, file=io.StringIO(), record=True, color_system=None)
    render(record, console)
    lines = console.export_text().splitlines()
    start = lines.index("environment") + 1
    rows = {}
    for line in lines[start:]:
        name, _, words = line.partition("  ")
        if not name or not words or name.startswith(("note:", "╭")):
            break
        rows[name] = words.strip()
    return rows


def _page_environment(record: RunRecord) -> dict[str, str]:
    section = re.search(r'<section id="environment">(.*?)</section>', render_html(record), re.S)
    rows = re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", section.group(1))
    return {html.unescape(name): html.unescape(words) for name, words in rows}


def test_the_environment_is_the_same_rows_in_the_terminal_and_on_the_page():
    record = RunRecord.load(DATA / "records" / "run_v1.json")
    terminal = _terminal_environment(record)
    assert {"torch", "cores", "loader", "cpu", "memory"} <= set(terminal), terminal
    assert _page_environment(record) == terminal
