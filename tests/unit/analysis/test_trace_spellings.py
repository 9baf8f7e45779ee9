"""Every Kineto spelling reads the same: the old category names (PyTorch 1.8-1.9: ``Operator``,
``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``), ``ProfilerStep#N`` and the DataLoader's label
as an operator or an annotation. A trace written in each spelling gives the same step breakdown,
DataLoader share, GPU breakdowns and verdict."""

from __future__ import annotations

import dataclasses

import pytest

from paths import HTA_TRACES, TESTS
from torchdoctor.analysis.trace_analysis import analyze_parsed_traces, analyze_trace
from torchdoctor.cli import main
from torchdoctor.trace import CATEGORY_ALIASES, load_trace
from tracegen import respell_file, training_trace

OTHER_SPELLINGS = ("old", "labels_as_ops")
SCENARIOS = {
    "gpu_busy": {"gpu_busy": True},
    "host_idle": {"gpu_busy": False},
    "starved": {"gpu_busy": False, "loader_us": 600.0},
    "some_loading": {"gpu_busy": True, "loader_us": 150.0},
}


#: DataLoader share of a starved training_trace: 600 of step 1's 1000 us, and 590 of step 2's
#: (its first 10 us overlap two 5 us kernels step 1 launched late, and kernels are claimed first).
STARVED_SHARE = (600 + 590) / 2000


def _analyse(path):
    record = analyze_parsed_traces([load_trace(path)])
    return record, record.trace.ranks[0]


def _host_parts_merged(rank: dict) -> dict:
    """``rank`` with each step's ``cpu_ops`` and ``other`` parts added into ``other``."""
    tables = [s["parts_ms"] for s in rank["steps"]] + [rank["step_parts_ms"], rank["step_shares"]]
    for parts in tables:
        parts["other"] += parts.pop("cpu_ops")
    return rank


def _same_analysis(new_path, other_path, merge_host_parts: bool = False) -> None:
    """Everything a trace's analysis says, except where the file lies, agrees between the two.

    With ``merge_host_parts`` the CPU-op and other parts of a step are compared as one, and a
    sync's enclosing op is not compared: an old trace writes every record_function label as an
    operator, so labels of the user's own (``## forward ##``) count as CPU ops there (and
    enclose syncs as ops) but as "other" in a new trace. Both are host time.
    """
    new, new_rank = _analyse(new_path)
    other, other_rank = _analyse(other_path)
    assert other.verdict.kind == new.verdict.kind
    assert other.verdict.shares == pytest.approx(new.verdict.shares)
    mine = dataclasses.asdict(other_rank)
    want = dataclasses.asdict(new_rank)
    for key in ("path", "parse", "notes"):
        mine.pop(key), want.pop(key)
    if merge_host_parts:
        mine, want = _host_parts_merged(mine), _host_parts_merged(want)
        for key in ("steps", "step_parts_ms", "step_shares"):
            assert _rounded(mine.pop(key)) == _rounded(want.pop(key)), key
        for syncs in (mine["syncs"], want["syncs"]):
            for site in syncs["sites"]:
                site.pop("ops")
    assert mine == want


def _rounded(value):
    """``value`` with every float rounded to 9 digits (sums taken in another order differ)."""
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def test_a_dataloader_starved_old_trace_is_input_bound(tmp_path):
    path = training_trace(gpu_busy=False, loader_us=600, spelling="old").write(tmp_path / "t.json")
    record = analyze_trace(str(path))
    rank = record.trace.ranks[0]
    assert [s.name for s in rank.steps] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert not any("no ProfilerStep" in n for n in record.notes)
    assert rank.dataloader_share == pytest.approx(STARVED_SHARE)
    assert rank.step_shares["runtime"] > 0 and rank.step_shares["gpu_kernels"] > 0
    assert record.verdict.kind == "INPUT-BOUND"


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("spelling", OTHER_SPELLINGS)
def test_each_spelling_gives_the_same_analysis(tmp_path, spelling, scenario):
    new = training_trace(**SCENARIOS[scenario]).write(tmp_path / "new.json")
    other = training_trace(spelling=spelling, **SCENARIOS[scenario]).write(tmp_path / "o.json")
    _same_analysis(new, other)


@pytest.mark.parametrize("spelling", ("new", "old"))
@pytest.mark.parametrize("loader_cat", ("user_annotation", "cpu_op", "python_function"))
@pytest.mark.parametrize(
    "loader_iter", ("_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter")
)
def test_the_dataloader_label_counts_in_either_form(tmp_path, spelling, loader_cat, loader_iter):
    b = training_trace(
        gpu_busy=False,
        loader_us=600,
        spelling=spelling,
        loader_iter=loader_iter,
        loader_cat=loader_cat,
    )
    record, rank = _analyse(b.write(tmp_path / "t.json"))
    assert rank.dataloader_share == pytest.approx(STARVED_SHARE)
    assert record.verdict.kind == "INPUT-BOUND"


#: Real traces (HTA's, MIT) with ProfilerSteps, kernels, memcpy, memset and runtime calls.
REAL = (
    "nccl_parser_config/nccl_data.json.gz",
    "critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "trace_compare/base/base.json.gz",
)


@pytest.mark.skipif(not HTA_TRACES.is_dir(), reason="the HTA sample traces are not checked out")
@pytest.mark.parametrize("rel", REAL, ids=lambda rel: rel.split("/")[0])
def test_a_real_trace_rewritten_in_the_old_spelling_reads_the_same(tmp_path, rel):
    source = HTA_TRACES / rel
    _same_analysis(source, respell_file(source, tmp_path / "old.json", "old"), True)


def test_cli_analyze_of_an_old_trace_names_the_dataloader(tmp_path, capsys):
    path = training_trace(gpu_busy=False, loader_us=600, spelling="old").write(tmp_path / "t.json")
    assert main(["analyze", str(path)]) == 0
    assert "VERDICT: INPUT-BOUND" in capsys.readouterr().out


def test_the_doc_lists_every_spelling_the_reader_maps():
    doc = (TESTS.parent / "docs" / "analyze.md").read_text().lower()
    section = doc[doc.index("## trace spellings") : doc.index("## what each number means")]
    for written, stored in CATEGORY_ALIASES.items():
        assert f"`{written}`" in section and f"`{stored}`" in section, written
