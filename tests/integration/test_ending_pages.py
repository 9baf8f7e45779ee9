"""Each ending's page in Debian's chromium: how the run ended comes first, in the verdict's place
and colour, saying what the terminal says; a completed run shows its verdict there. Records are
built from synthetic ranks (jobgen) so every ending is rendered, the job's too."""

from __future__ import annotations

from pathlib import Path

import pytest

from browser import assert_offline, browser_views
from jobgen import rank_record
from torchdoctor.analysis.distributed import combine
from torchdoctor.analysis.verdict import summarise
from torchdoctor.process.ending import JobEnd, decide_job, settle
from torchdoctor.record import Finding, RunRecord
from torchdoctor.report.html import write_html
from torchdoctor.report.terminal import ending_words

pytestmark = pytest.mark.integration

#: What the page's verdict card shows first: (the ending's label, its colour class).
ENDINGS = {
    "script-error": ("FAILED", "bad"),
    "out-of-memory": ("OUT OF MEMORY", "bad"),
    "killed": ("KILLED", "bad"),
    "internal-error": ("TORCHDOCTOR FAILED", "bad"),
    "interrupted": ("STOPPED", "warn"),
    "timed-out": ("STOPPED AT THE BOUND", "warn"),
    "partial": ("ENDED EARLY", "warn"),
}
#: The card's first line, its colour, the sentence under it, and whether a line overflows.
CARD = """() => {
  const card = document.querySelector('#verdict');
  const first = card.firstElementChild;
  const next = first.nextElementSibling;
  const pres = [...document.querySelectorAll('pre')];
  return {first: first.innerText, firstClass: first.className, firstColor:
          getComputedStyle(first).color, words: next ? next.innerText : '',
          bad: getComputedStyle(document.documentElement).getPropertyValue('--bad').trim(),
          overflowing: pres.filter(p => p.scrollWidth > p.clientWidth + 1).length};
}"""


def one_process(status: str):
    record = rank_record(0, 1.0, 3.0, None, world_size=1)
    record.status = status
    record.findings.append(Finding(kind="straggler", title="a finding", severity="warning",
                                   fix="x" * 400 + " and more words after a very long token"))  # fmt: skip
    summarise(record)
    return record


def failed_job():
    job = combine([rank_record(0, 1.0, 3.0, 2.5), rank_record(1, 1.0, 3.0, 2.5)], backend="gloo")
    # how the launcher ends it (process.launch): rank 1 raised, the launcher ended the others
    cause = JobEnd(cause_status="script-error", cause_words="rank 1 raised RuntimeError at step 5")
    settle(job, decide_job(cause, measured=True), derive=False, first=True)
    job.distributed.ranks[1].status = "script-error"
    job.distributed.ranks[1].ended = "raised RuntimeError at step 5"
    job.distributed.ranks[1].error = [
        "Traceback (most recent call last):\n",
        "RuntimeError: " + "y" * 300,
    ]
    return job


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple[RunRecord, Path, dict]]:
    """Each ending's page, the failed job's and a completed run's, opened in one chromium: by
    name, the record, its page and what the browser saw of it."""
    folder = tmp_path_factory.mktemp("ending_pages")
    records = {status: one_process(status) for status in [*sorted(ENDINGS), "complete"]}
    records["job"] = failed_job()
    paths = {name: write_html(record, folder / f"{name}.html") for name, record in records.items()}
    views = browser_views([(path, CARD) for path in paths.values()])
    return {name: (records[name], paths[name], view) for name, view in zip(paths, views)}


@pytest.mark.parametrize("status", sorted(ENDINGS))
def test_an_ending_leads_the_page_in_its_colour(status, pages):
    record, path, view = pages[status]
    assert_offline(view, path)
    card = view["extra"]
    label, tone = ENDINGS[status]
    assert card["first"] == label and tone in card["firstClass"].split()
    assert card["words"] == ending_words(record)  # the terminal's "Ended" line says the same
    assert card["overflowing"] == 0, "a code or fix block scrolls instead of wrapping"


def test_a_failed_job_names_its_rank_first_and_each_rank_its_verdict(pages):
    _, path, view = pages["job"]
    assert_offline(view, path)
    card = view["extra"]
    assert card["first"] == "FAILED" and "bad" in card["firstClass"].split()
    assert card["words"].startswith("rank 1 raised RuntimeError at step 5")
    assert "backend gloo" in view["text"] and "backend ?" not in view["text"]
    assert "rank 1: raised RuntimeError at step 5" in view["text"]
    assert "own verdict" in view["text"]
    assert "never initialised" not in view["text"]
    assert card["overflowing"] == 0


def test_a_completed_run_shows_its_verdict_first(pages):
    record, _, view = pages["complete"]
    card = view["extra"]
    assert card["first"] == record.verdict.kind and "kind" in card["firstClass"].split()
