"""Figures the docs and the help quote are the code's: a count or a message written out in words
goes stale silently when the code changes, so each one here is read back from the code."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from torchdoctor import cli
from torchdoctor.capture.phases.trace import TRACE_ACTIVE_STEPS, TRACE_WARMUP_STEPS
from torchdoctor.record import SCHEMA_VERSION, RecordError, RunRecord

DOCS = Path(__file__).resolve().parents[2] / "docs"


def one_line(text: str) -> str:
    """Text with its line breaks and runs of spaces as single spaces (help and docs wrap)."""
    return re.sub(r"\s+", " ", text)


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"torchdoctor": parser, **sub.choices}


@pytest.mark.parametrize(
    "wrong",
    [
        {"steps": 5},
        {"steps": {"step_ms": [1.0, "x"]}},
        {"step_ms": {"median": 1.0}},
        {"findings": [{"kind": "nope", "title": "t", "fix": "f"}]},
    ],
    ids=["object", "number", "missing", "finding-kind"],
)
def test_the_wrong_record_messages_in_the_cli_doc_are_the_codes(tmp_path, wrong):
    # The finding-kind message counts the kinds known (record/_kinds.py): the doc said 31
    # when there were 44.
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **wrong}))
    with pytest.raises(RecordError) as err:
        RunRecord.load(path)
    message = str(err.value).replace(str(path), "PATH")
    assert f"`{message}`" in (DOCS / "cli.md").read_text()


def test_the_trace_step_counts_in_the_help_and_the_docs_are_the_trace_phases():
    kept = f"trace of {TRACE_ACTIVE_STEPS} untimed steps, after {TRACE_WARMUP_STEPS} warm-up step"
    assert kept in one_line(commands()["run"].format_help())
    assert kept in one_line((DOCS / "cli.md").read_text())
    phase = (
        f"{TRACE_WARMUP_STEPS + TRACE_ACTIVE_STEPS} more untimed steps under `torch.profiler` "
        f"({TRACE_WARMUP_STEPS} warm-up, {TRACE_ACTIVE_STEPS} recorded)"
    )
    assert phase in one_line((DOCS / "how-it-works.md").read_text())


@pytest.mark.parametrize("command", list(commands()))
def test_no_help_prints_an_escaped_percent(command):
    # argparse expands %-escapes in an argument's help, not in a description: "90%%" there
    # was printed as it is.
    assert "%%" not in commands()[command].format_help()
