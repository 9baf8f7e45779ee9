"""The job section of the terminal report, drawn from records that ``combine`` builds."""

from __future__ import annotations

import io

from rich.console import Console

from jobgen import rank_record
from torchdoctor.analysis.distributed import combine
from torchdoctor.analysis.verdict import summarise
from torchdoctor.record import RunRecord
from torchdoctor.report.distributed import TRACEBACK_LINES
from torchdoctor.report.terminal import render


def rendered(record: RunRecord) -> str:
    console = Console(record=True, width=120, file=io.StringIO(), color_system=None)
    render(record, console)
    return console.export_text()


def test_a_straggler_is_named_with_the_ranks_that_wait_for_it():
    # Rank 1 waits for data; rank 0's backward holds its wait in the all-reduce.
    job = combine([rank_record(0, 0.1, 45.0, 5.8), rank_record(1, 40.0, 3.0, 46.7)], backend="nccl")
    text = rendered(job)
    assert "job: 2 ranks on 1 node(s), backend nccl" in text
    assert "straggler" in text and "waits for rank 1" in text
    assert "INPUT-BOUND" in text and "COMPUTE-BOUND" in text  # each rank's own verdict
    assert "straggler: rank 1, slowest in waiting for data" in text
    assert "rank(s) 0 wait 43.0 ms per step for it" in text
    assert "communication made free (no_sync): step 46.7 ms" in text
    assert "scaling efficiency:" in text
    assert "step breakdown of rank 1 (the straggler)" in text
    # The job section comes right after the verdict, before the breakdown.
    assert text.index("diagnosis") < text.index("job: 2 ranks") < text.index("step breakdown")


def test_balanced_ranks_have_no_roles_and_the_breakdown_shows_rank_0():
    job = combine([rank_record(0, 0.1, 3.0, 6.8), rank_record(1, 0.2, 3.0, 6.9)])
    text = rendered(job)
    title = next(line for line in text.splitlines() if line.startswith("job:"))
    assert title.rstrip() == "job: 2 ranks on 1 node(s)"  # no backend recorded, none shown
    assert "straggler" not in text and "waits for" not in text
    assert "skew: own work differs by 0.1 ms per step across ranks" in text
    assert "step breakdown of rank 0 (ms per step)" in text


def test_without_a_no_sync_phase_the_wait_is_an_estimate_and_says_so():
    job = combine([rank_record(0, 0.1, 3.0, None), rank_record(1, 0.2, 30.0, None)])
    text = rendered(job)
    assert "comm/wait without a no-sync phase" in text
    assert "communication made free" not in text and "scaling efficiency" not in text


def test_a_rank_that_raised_shows_its_traceback_and_a_missing_rank_is_named():
    traceback = [
        "Traceback (most recent call last):",
        *(f'  File "train.py", line {n}, in step' for n in range(1, 21)),
        "RuntimeError: CUDA out of memory",
    ]
    job = combine(
        [
            rank_record(0, 0.1, 3.0, 6.8, world_size=3, host="node-a.cluster"),
            rank_record(1, 0.2, 3.0, 6.9, world_size=3, host="node-b.cluster"),
        ],
        nnodes=2,
        errors={1: traceback},
        ended={1: "exit status 1"},
    )
    text = rendered(job)
    assert "job: 3 ranks on 2 node(s)" in text
    assert "0 node-a:0" in text and "1 node-b:1" in text  # host and local rank on many nodes
    assert "missing: rank(s) 2 sent nothing" in text
    assert "rank 1 raised" in text and f"last {TRACEBACK_LINES} of 22 lines" in text
    assert "RuntimeError: CUDA out of memory" in text
    assert "line 20, in step" in text and "line 1, in step" not in text


def test_a_narrow_console_splits_the_ranks_table_and_cuts_no_figure():
    job = combine([rank_record(0, 0.1, 45.0, 5.8), rank_record(1, 40.0, 3.0, 46.7)])
    console = Console(record=True, width=80, file=io.StringIO(), color_system=None)
    render(job, console)
    text = console.export_text()
    assert "step parts of each rank" in text
    assert "46.7" in text and "43.0" in text and "waits for" in text
    assert "…" not in text.split("step breakdown")[0]


def test_a_single_process_record_has_no_job_section():
    record = rank_record(0, 0.1, 3.0, None, world_size=1)
    summarise(record)
    text = rendered(record)
    assert "job:" not in text and "ranks (mean ms per step)" not in text
    assert "step breakdown (ms per step)" in text


def test_the_page_names_each_nodes_ranks_and_their_communication():
    from torchdoctor.report.html import render_html

    job = combine(
        [
            rank_record(0, 0.1, 3.0, 6.8, host="node-a.cluster"),
            rank_record(1, 0.2, 3.0, 6.9, host="node-b.cluster"),
        ],
        nnodes=2,
    )
    page = render_html(job)
    assert "2 ranks on 2 node(s)" in page and "<th>rank (host:local)</th>" in page
    assert "<td>0 node-a:0</td>" in page and "<td>1 node-b:1</td>" in page
    assert "<th class='n'>comm/wait</th>" in page
    comm = job.distributed.ranks[0].comm_ms
    assert f"<td class='n'>{comm:.2f}</td>" in page
