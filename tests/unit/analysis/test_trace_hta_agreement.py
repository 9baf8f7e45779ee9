"""torchdoctor's GPU breakdowns against HolisticTraceAnalysis on the shared real traces.

The reference numbers were produced by HTA itself (tests/data/make_hta_reference.py states the
command); neither HTA nor pandas is needed here. Each trace is parsed once per module.
"""

from __future__ import annotations

import json

import pytest

from paths import DATA, HTA_TRACES
from torchdoctor.analysis import trace_gpu
from torchdoctor.analysis.trace_analysis import analyze_parsed_traces
from torchdoctor.cli import main
from torchdoctor.record import RunRecord
from torchdoctor.trace import RankTrace, load_trace

TRACES = HTA_TRACES
REFERENCE = json.loads((DATA / "hta_reference.json").read_text())
#: The agreement the issue asks for, in percentage points.
TOLERANCE_PP = 0.5

pytestmark = pytest.mark.skipif(
    not TRACES.is_dir(), reason=f"shared HTA traces not found at {TRACES} (clone shared/ beside)"
)


@pytest.fixture(scope="module")
def traces():
    """Parse each shared trace at most once for the whole module."""
    cache: dict[str, RankTrace] = {}

    def get(rel: str) -> RankTrace:
        if rel not in cache:
            cache[rel] = load_trace(TRACES / rel)
        return cache[rel]

    return get


@pytest.mark.parametrize("rel", sorted(REFERENCE["traces"]))
def test_temporal_breakdown_agrees_with_hta(traces, rel):
    t = traces(rel)
    ref = REFERENCE["traces"][rel]["temporal"]
    view = trace_gpu.gpu_view(t, len(trace_gpu.step_names([t])))
    ours = trace_gpu.temporal_breakdown(t, view)
    for key in ("idle_pct", "compute_pct", "non_compute_pct"):
        assert getattr(ours, key) == pytest.approx(ref[key], abs=TOLERANCE_PP), key
    assert ours.kernel_span_us == pytest.approx(ref["kernel_time_us"], rel=1e-3)


@pytest.mark.parametrize("rel", sorted(REFERENCE["traces"]))
def test_idle_time_breakdown_agrees_with_hta(traces, rel):
    t = traces(rel)
    ref_streams = REFERENCE["traces"][rel]["idle"]["streams_us"]
    view = trace_gpu.gpu_view(t, len(trace_gpu.step_names([t])))
    ours = trace_gpu.idle_breakdown(t, view)
    for stream, ref in ref_streams.items():
        mine = ours.streams_us[stream]
        ref_total, my_total = sum(ref.values()), sum(mine.values())
        assert my_total == pytest.approx(ref_total, abs=1.0)
        for category, value in ref.items():
            # Shares of the stream's idle time, in percentage points.
            ref_pct = 100 * value / ref_total if ref_total else 0.0
            my_pct = 100 * mine[category] / my_total if my_total else 0.0
            assert my_pct == pytest.approx(ref_pct, abs=TOLERANCE_PP), (stream, category)


NS = "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
NCCL = "nccl_parser_config/nccl_data.json.gz"


@pytest.mark.parametrize(
    "rel, kind", [(NS, "COMPUTE-BOUND"), (NCCL, "HOST-BOUND")], ids=["ns_resolution", "nccl"]
)
def test_verdicts_on_real_traces(traces, rel, kind):
    record = analyze_parsed_traces([traces(rel)])
    assert record.verdict.kind == kind
    assert record.verdict.why and record.verdict.next
    rank = record.trace.ranks[0]
    assert sum(rank.step_parts_ms.values()) == pytest.approx(rank.step_wall_ms, rel=1e-9)


def test_amd_trace_with_hip_names_and_no_rank(traces):
    record = analyze_parsed_traces([traces("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")])
    assert any("no distributedInfo.rank" in n for n in record.notes)
    syncs = record.trace.ranks[0].syncs
    assert syncs.sites[0].call == "hipMemcpyWithStream"
    assert record.verdict.kind == "HOST-BOUND"


def test_trace_without_profiler_step_works_with_a_note(traces):
    rel = "critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"
    record = analyze_parsed_traces([traces(rel)])
    assert any("no ProfilerStep" in n for n in record.notes)
    assert record.verdict.kind in {"HOST-BOUND", "COMPUTE-BOUND", "INPUT-BOUND"}
    assert any(f.kind == "pageable-memcpy" for f in record.findings)


def test_cli_on_a_shared_trace_directory(tmp_path, capsys):
    out = tmp_path / "ns.json"
    assert main(["analyze", str(TRACES / "ns_resolution_trace"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "VERDICT: COMPUTE-BOUND" in text and "2.63%" in text
    assert RunRecord.load(out).verdict.kind == "COMPUTE-BOUND"
