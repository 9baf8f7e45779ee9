"""Each ending's page in Debian's chromium: how the run ended comes first, in the verdict's place
and colour, saying what the terminal says; a completed run shows its verdict there. Records are
built from synthetic ranks (jobgen) so every ending is rendered, the job's too."""

from __future__ import annotations

import pytest

from browser import assert_offline, browser_view
from jobgen import rank_record
from torchdoctor.analysis.distributed import combine
from torchdoctor.analysis.verdict import summarise
from torchdoctor.process.ending import JobEnd, decide_job, settle
from torchdoctor.record import Finding
from torchdoctor.report.html import write_html
from torchdoctor.report.terminal import ending_words

pytestmark = pytest.mark.integration

#: What the page's verdict card shows first: (the ending's label, its colour class).
ENDINGS = {
    "script-error": ("FAILED", "bad"),
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


@pytest.mark.parametrize("status", sorted(ENDINGS))
def test_an_ending_leads_the_page_in_its_colour(status, tmp_path):
    record = one_process(status)
    path = write_html(record, tmp_path / "p.html")
    view = browser_view(path, CARD)
    assert_offline(view, path)
    card = view["extra"]
    label, tone = ENDINGS[status]
    assert card["first"] == label and tone in card["firstClass"].split()
    assert card["words"] == ending_words(record)  # the terminal's "Ended" line says the same
    assert card["overflowing"] == 0, "a code or fix block scrolls instead of wrapping"


def test_a_failed_job_names_its_rank_first_and_each_rank_its_verdict(tmp_path):
    job = failed_job()
    path = write_html(job, tmp_path / "job.html")
    view = browser_view(path, CARD)
    assert_offline(view, path)
    card = view["extra"]
    assert card["first"] == "FAILED" and "bad" in card["firstClass"].split()
    assert card["words"].startswith("rank 1 raised RuntimeError at step 5")
    assert "backend gloo" in view["text"] and "backend ?" not in view["text"]
    assert "rank 1: raised RuntimeError at step 5" in view["text"]
    assert "own verdict" in view["text"]
    assert "never initialised" not in view["text"]
    assert card["overflowing"] == 0


def test_a_completed_run_shows_its_verdict_first(tmp_path):
    record = one_process("complete")
    path = write_html(record, tmp_path / "ok.html")
    card = browser_view(path, CARD)["extra"]
    assert card["first"] == record.verdict.kind and "kind" in card["firstClass"].split()
