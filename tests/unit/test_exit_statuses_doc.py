"""docs/cli.md lists every exit status the command line uses, and no other."""

from __future__ import annotations

import re
from pathlib import Path

from torchdoctor import _errors

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_exit_status_table_lists_the_constants_of_the_code():
    text = DOC.read_text()
    section = text.split("## Exit statuses", 1)[1].split("\n## ", 1)[0]
    table = section.split("\n\n", 2)[1]  # the first table of the section
    documented = {int(n) for n in re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)}
    in_code = {v for k, v in vars(_errors).items() if k.startswith("EXIT_")}
    assert documented == in_code
