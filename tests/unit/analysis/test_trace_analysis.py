"""Trace analyses on small hand-built traces: each number is known in advance."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import pytest

from torchdoctor.analysis import trace_gpu, trace_host, trace_steps
from torchdoctor.analysis.trace_analysis import analyze_parsed_traces, analyze_trace
from torchdoctor.analysis.trace_comm import rank_skew
from torchdoctor.analysis.trace_ranks import MEMORY_PER_MB_OF_TRACE
from torchdoctor.cli import main
from torchdoctor.record import RunRecord
from torchdoctor.trace import load_trace
from tracegen import TraceBuilder, ddp_trace, training_trace


def _load(builder: TraceBuilder, tmp_path, name="t.json"):
    return load_trace(builder.write(tmp_path / name))


def test_step_parts_are_claimed_in_priority_order_and_sum_to_wall_time(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 1000)
    b.host(
        "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
        0,
        300,
        cat="user_annotation",
    )
    b.host("aten::addmm", 300, 200)  # CPU op 300..500
    # cudaLaunchKernel 400..450 lies inside the CPU op: runtime outranks CPU ops there.
    b.launch("cudaLaunchKernel", 400, 50, "gemm", 450, 400)  # kernel 450..850 overlaps the op
    t = _load(b, tmp_path)
    sb = trace_steps.step_breakdown(t)
    assert sb.analysed_steps == 1  # the last ProfilerStep is left out, as in HTA
    parts = sb.per_step_ms[0]
    assert parts["gpu_kernels"] == pytest.approx(0.400)
    assert parts["runtime"] == pytest.approx(0.050)  # 400..450
    assert parts["dataloader"] == pytest.approx(0.300)
    assert parts["cpu_ops"] == pytest.approx(0.100)  # 300..400; 450..500 went to the GPU
    assert parts["other"] == pytest.approx(0.150)  # 850..1000
    assert sum(parts.values()) == pytest.approx(1.0)
    assert sb.total_ms == pytest.approx(parts)
    assert sb.share("dataloader") == pytest.approx(0.3)


def test_no_profiler_step_analyses_the_whole_trace_with_a_note(tmp_path):
    b = TraceBuilder(rank=None)
    b.host("aten::mm", 0, 100)
    b.host("aten::mm", 200, 100)
    record = analyze_parsed_traces([_load(b, tmp_path, "cpu_only.json")])
    (rank,) = record.trace.ranks
    assert rank.steps[0].name == "whole trace"
    assert rank.step_wall_ms == pytest.approx(0.3)
    assert any("no ProfilerStep" in n for n in record.notes)
    assert any("no distributedInfo.rank" in n for n in record.notes)
    assert rank.label == "cpu_only"
    assert record.verdict.kind == "COMPUTE-BOUND"  # CPU ops do the math on a CPU-only trace


def test_gpu_busy_trace_is_compute_bound_and_idle_host_trace_is_host_bound(tmp_path):
    busy = analyze_parsed_traces([_load(training_trace(gpu_busy=True), tmp_path, "busy.json")])
    idle = analyze_parsed_traces([_load(training_trace(gpu_busy=False), tmp_path, "idle.json")])
    assert busy.verdict.kind == "COMPUTE-BOUND"
    assert idle.verdict.kind == "HOST-BOUND"
    t_idle = idle.trace.ranks[0]
    assert t_idle.temporal.idle_pct > 50
    # Steps 1-2 are kept: 9 gaps of 45 us per step between kernels launched early ("other"),
    # and one 545 us gap before step 2's first kernel, launched after step 1's last ended.
    assert t_idle.idle.streams_us["7"] == {
        "host_wait": 545.0,
        "kernel_wait": 0.0,
        "other": 810.0,
    }


def test_slow_dataloader_is_input_bound(tmp_path):
    record = analyze_parsed_traces([_load(training_trace(gpu_busy=False, loader_us=600), tmp_path)])
    assert record.verdict.kind == "INPUT-BOUND"
    assert record.verdict.shares["input"] >= 0.5
    assert any(f.kind == "dataloader" for f in record.findings)


def test_idle_split_host_wait_kernel_wait_other(tmp_path):
    b = TraceBuilder()
    b.launch("cudaLaunchKernel", 0, 5, "k1", 10, 10)  # GPU 10..20
    b.launch("cudaLaunchKernel", 50, 5, "k2", 60, 10)  # launched at 50 > 20: host wait 40
    b.launch("cudaLaunchKernel", 55, 5, "k3", 80, 10)  # launched early, gap 10 < 30: kernel wait
    b.launch("cudaLaunchKernel", 56, 5, "k4", 190, 10)  # launched early, gap 100: other
    t = _load(b, tmp_path)
    view = trace_gpu.gpu_view(t, n_step_names=0)
    idle = trace_gpu.idle_breakdown(t, view)
    assert idle.streams_us["7"] == {"host_wait": 40.0, "kernel_wait": 10.0, "other": 100.0}
    temporal = trace_gpu.temporal_breakdown(t, view)
    assert temporal.kernel_span_us == 190 and temporal.idle_us == 150
    assert temporal.compute_pct == pytest.approx(40 / 190 * 100)


def test_kernel_types_follow_hta():
    assert trace_gpu.kernel_type("ncclKernel_AllReduce_RING_LL_Sum_float(x)") == "COMMUNICATION"
    assert trace_gpu.kernel_type("Memcpy HtoD (Pageable -> Device)") == "MEMORY"
    assert trace_gpu.kernel_type("Stream Sync") == "OTHER"
    assert trace_gpu.kernel_type("void gemm_kernel<float>()") == "COMPUTATION"


def test_sync_is_traced_to_the_users_line_and_op(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 10)
    b.python("train.py(12): <module>", 0, 900)
    b.python("train.py(40): train_step", 100, 700)
    b.python("/usr/lib/python3/site-packages/torch/_tensor.py(900): item", 300, 300)
    b.host("aten::item", 310, 280)
    b.host("aten::_local_scalar_dense", 320, 260)
    b.launch(
        "cudaStreamSynchronize",
        330,
        250,
        "Memcpy DtoH (Device -> Pageable)",
        500,
        5,
        cat="gpu_memcpy",
        bytes=4,
    )
    t = _load(b, tmp_path)
    report = trace_host.sync_report(t)
    (site,) = report.sites
    assert (site.file, site.line, site.function) == ("train.py", 40, "train_step")
    assert site.ops == "aten::item > aten::_local_scalar_dense"
    assert site.count == 1 and site.blocked_ms == pytest.approx(0.25)
    record = analyze_parsed_traces([t])
    finding = next(f for f in record.findings if f.kind == "host-sync")
    assert (finding.file, finding.line) == ("train.py", 40)
    assert any(f.kind == "pageable-memcpy" for f in record.findings)


def test_launch_bound_needs_short_kernels_and_slow_launches(tmp_path):
    b = TraceBuilder()
    for k in range(20):
        b.launch("cudaLaunchKernel", k * 20, 15, "tiny", k * 20 + 16, 2)
    assert trace_host.launch_stats(_load(b, tmp_path)).launch_bound
    b = TraceBuilder()
    for k in range(20):
        b.launch("cudaLaunchKernel", k * 200, 15, "big", k * 200 + 16, 150)
    assert not trace_host.launch_stats(_load(b, tmp_path, "b.json")).launch_bound


def _job(tmp_path, loaders_us, comm_us=200.0):
    """A lockstep data-parallel job traced on each rank; ``loaders_us`` is each rank's
    DataLoader time per step."""
    slowest = max(loaders_us)
    for rank, loader in enumerate(loaders_us):
        b = ddp_trace(rank, len(loaders_us), loader, slowest, comm_us=comm_us)
        b.write(tmp_path / f"rank{rank}.json")
    return analyze_trace([str(tmp_path)])


def test_rank_skew_finds_the_straggler_by_own_work_not_by_step_time(tmp_path):
    ranks = _job(tmp_path, [0.0, 400.0]).trace.ranks
    skew = rank_skew(ranks)
    # In lockstep every step is as long on both ranks: the median steps cannot tell.
    assert skew.skew == pytest.approx(0.0)
    assert skew.own_ms == pytest.approx({"rank 0": 0.6, "rank 1": 1.0})
    assert skew.exposed_comm_ms == pytest.approx({"rank 0": 0.6, "rank 1": 0.2})
    assert skew.straggler and skew.straggler_rank == "rank 1" and skew.waiting == ["rank 0"]
    assert skew.part == "dataloader"
    assert skew.excess_ms == pytest.approx(0.4) and skew.wait_ms == pytest.approx(0.4)
    assert rank_skew(ranks[:1]) is None


def test_a_slow_data_rank_is_the_straggler_and_the_other_waits(tmp_path, capsys):
    record = _job(tmp_path, [0.0, 400.0])
    v = record.verdict
    assert v.kind == "INPUT-BOUND"
    assert v.why.startswith(
        "rank 1 is a straggler: it spends 0.40 ms per step more than the other ranks on its own "
        "work, mostly waiting for data, and every other rank waits for it in the collectives "
        "(0.40 ms per step); on rank 1: the DataLoader took 33% of each step"
    )
    assert v.next.startswith("on rank 1: ")
    assert v.shares["input"] == pytest.approx(1 / 3)
    first = record.findings[0]
    assert first.kind == "straggler" and first.severity == "critical"
    assert first.title == (
        "rank 1 is a straggler: its own work per step is 0.40 ms longer than the other ranks' "
        "(mostly waiting for data); rank(s) 0 wait 0.40 ms per step for it in the collectives"
    )
    assert first.fix.startswith("make this rank's input as fast as the others'")
    (overlap,) = [f for f in record.findings if f.kind == "comm-overlap" and "rank 0" in f.title]
    assert overlap.title.startswith(
        "exposed communication on rank 0: 0.60 ms per step (50% of the step)"
    )
    assert "the wait for the straggler, rank 1" in overlap.title
    assert overlap.cost_ms == pytest.approx(0.6)
    assert main(["analyze", str(tmp_path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "rank 1 is a straggler; rank 0 waits 0.40 ms per step for it" in text
    assert "rank 0 0.60 (exposed communication 0.60)" in text


def test_a_balanced_pair_names_no_straggler(tmp_path):
    record = _job(tmp_path, [100.0, 100.0])
    assert not record.trace.skew.straggler and record.trace.skew.straggler_rank == ""
    assert not [f for f in record.findings if f.kind == "straggler"]
    assert record.verdict.kind == "COMPUTE-BOUND"
    assert record.verdict.why.startswith(
        "the 2 ranks are balanced (own work differs by 0.00 ms per step); GPU work filled"
    )


def test_a_balanced_pair_that_mostly_communicates_is_communication_bound(tmp_path):
    record = _job(tmp_path, [0.0, 0.0], comm_us=800.0)
    assert not record.trace.skew.straggler
    v = record.verdict
    assert v.kind == "COMMUNICATION-BOUND"
    assert (
        "the ranks spend 57% of a mean 1.40 ms step in exposed communication (0.80 ms per step"
        in v.why
    )
    assert v.next.startswith("hide or shrink the all-reduce")


def test_two_ranks_give_skew_and_comm_overlap(tmp_path):
    files = []
    for rank, slow in ((0, 0.0), (1, 400.0)):
        b = training_trace(rank=rank, gpu_busy=True)
        b.meta["distributedInfo"]["world_size"] = 2
        for s in range(3):
            b.launch(
                "cudaLaunchKernel",
                10_000 + s * 1000 + 60,
                2,
                "ncclKernel_AllReduce_x",
                10_000 + s * 1000 + 900,
                300,
            )
        if slow:
            b.events = [
                {**e, "dur": e["dur"] + slow} if e["name"].startswith("ProfilerStep") else e
                for e in b.events
            ]
        files.append(b.write(tmp_path / f"rank{rank}.json"))
    record = analyze_trace([str(tmp_path)])
    trace = record.trace
    assert [r.label for r in trace.ranks] == ["rank 0", "rank 1"]
    assert trace.skew.straggler and trace.skew.slowest == "rank 1"
    comm = trace.ranks[0].comm
    assert 0 < comm.overlap_pct < 100
    # Rank 1's steps are 400 us longer with the same communication: its own work is the larger.
    assert trace.skew.straggler_rank == "rank 1" and trace.skew.waiting == ["rank 0"]
    (straggler,) = [f for f in record.findings if f.kind == "straggler"]
    assert straggler.title.startswith("rank 1 is a straggler: its own work per step is")
    assert "rank(s) 0 wait" in straggler.title
    assert record.verdict.why.startswith("rank 1 is a straggler:")


def test_cli_analyze_writes_a_record_that_reloads(tmp_path, capsys):
    path = training_trace(gpu_busy=False).write(tmp_path / "t.json.gz")
    out = tmp_path / "out" / "analysis.json"
    assert main(["analyze", str(path), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "VERDICT: HOST-BOUND" in text and "Why:" in text and "Next:" in text
    record = RunRecord.load(out)
    assert record.verdict.kind == "HOST-BOUND"
    assert record.trace.ranks[0].temporal.idle_pct > 50
    assert json.loads(out.read_text())["trace"]["ranks"][0]["temporal"]["idle_pct"] > 50


@pytest.mark.parametrize("content", [b'{"traceEvents": [{"ph": "X", "ts": 1', b"\x1f\x8bnot gzip"])
def test_cli_analyze_bad_file_is_an_error_without_traceback(tmp_path, capsys, content):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content)
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("torchdoctor: error:") and "not a readable trace" in err
    assert "fix:" in err and "Traceback" not in err


def test_cli_analyze_missing_path(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_render_trace_section_for_the_lead_renderer(tmp_path):
    from rich.console import Console

    from torchdoctor.report.trace_terminal import render_trace_section

    console = Console(record=True, width=100)
    render_trace_section(RunRecord(), console)  # a run record without a trace: nothing
    assert console.export_text() == ""
    cpu_only = TraceBuilder(rank=None)
    cpu_only.step(1, 0, 100)
    cpu_only.host("aten::mm", 10, 50)
    for record in (
        analyze_parsed_traces([_load(cpu_only, tmp_path, "cpu.json")]),
        analyze_parsed_traces(
            [_load(training_trace(rank=r), tmp_path, f"r{r}.json") for r in (0, 1)]
        ),
    ):
        render_trace_section(record, console)
    text = console.export_text()
    assert "no GPU activity" in text and "rank 1" in text and "gemm_kernel" in text


def test_an_analysis_of_two_ranks_round_trips_through_the_record(tmp_path):
    record = analyze_parsed_traces(
        [_load(training_trace(rank=r), tmp_path, f"r{r}.json") for r in (0, 1)]
    )
    assert record.trace.analysed and len(record.trace.ranks) == 2
    assert record.trace.ranks[0].temporal is not None and record.trace.ranks[0].idle is not None
    assert record.trace.verdict == record.verdict and record.trace.verdict is not record.verdict
    again = RunRecord.load(record.save(tmp_path / "r.json"))
    assert again == record


def test_a_folder_with_a_broken_file_skips_it_by_name_and_analyses_the_rest(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    training_trace(rank=0).write(folder / "rank0.json")
    training_trace(rank=1).write(folder / "rank1.json")
    (folder / "rank2.json").write_text('{"traceEvents": [{"ph": "X", ')  # cut short
    (folder / "config.json").write_text("not json at all")
    record = analyze_trace(str(folder))
    assert [r.rank for r in record.trace.ranks] == [0, 1]
    skipped = [n for n in record.notes if n.startswith("skipped ")]
    assert len(skipped) == 2, record.notes
    assert any("config.json: not a readable trace" in n for n in skipped)
    assert any("rank2.json: not a readable trace" in n for n in skipped)
    # nothing readable at all: the first file's error, as before
    (folder / "rank0.json").unlink()
    (folder / "rank1.json").unlink()
    with pytest.raises(Exception, match="config.json: not a readable trace"):
        analyze_trace(str(folder))


def test_a_kernel_is_joined_once_per_kept_host_call_of_its_correlation(tmp_path):
    """HTA's inner join of GPU events with the kept host events that share their correlation:
    two kept calls carrying one correlation give the kernel twice (its busy time once), a call
    from the left-out last step gives it no copy."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.step(2, 1000, 1000)
    b.launch("cudaLaunchKernel", 100, 10, "gemm", 120, 300)
    twice = b._corr
    b.host("cudaGraphLaunch", 150, 10, cat="cuda_runtime", correlation=twice)
    b.launch("cudaLaunchKernel", 500, 10, "gemm", 520, 200)
    late = b._corr
    b.host("cudaLaunchKernel", 1100, 10, cat="cuda_runtime", correlation=late)  # left out
    view = trace_gpu.gpu_view(_load(b, tmp_path), 2)
    assert list(view.ts) == [120.0, 120.0, 520.0]
    # the launch is the last host call's, unknown when that one was left out
    assert list(view.launch_ts)[:2] == [150.0, 150.0] and math.isnan(view.launch_ts[2])


def test_each_sync_is_given_the_frame_and_the_ops_that_enclose_it_among_many(tmp_path):
    """Nested frames and ops on two threads, most of them enclosing no sync: the report's
    frame and ops of each sync are those a search of every event finds."""
    rng = random.Random(11)
    b = TraceBuilder()
    b.step(1, 0, 100_000)
    b.step(2, 100_000, 10)
    events = []  # (tid, ts, end, cat, name)

    def nest(tid, start, end, depth):
        at = start
        while at < end - 40:
            length = rng.randint(20, min(4_000, end - at))
            if depth < 4 and rng.random() < 0.6:
                cat, name = rng.choice(
                    [("python_function", f"train.py({depth}{at % 7}): f{depth}"),
                     ("python_function", "/x/site-packages/torch/nn/module.py(9): call"),
                     ("cpu_op", f"aten::op{depth}_{at % 3}")]
                )  # fmt: skip
                events.append((tid, at, at + length, cat, name))
                nest(tid, at + 1, at + length - 1, depth + 1)
            elif rng.random() < 0.05:
                events.append((tid, at, at + length, "cuda_runtime", "cudaStreamSynchronize"))
            at += length + rng.randint(0, 30)

    for tid in (1, 2):
        nest(tid, 0, 90_000, 0)
    for tid, ts, end, cat, name in events:
        if cat == "cuda_runtime":
            b.host(name, ts, end - ts, cat=cat, tid=tid, correlation=ts)
        elif cat == "python_function":
            b.host(name, ts, end - ts, cat=cat, tid=tid)
        else:
            b.host(name, ts, end - ts, tid=tid)
    syncs = [e for e in events if e[3] == "cuda_runtime"]
    assert len(syncs) > 20 and len(events) > 10 * len(syncs)

    def enclosing(sync, cat):
        tid, ts, end = sync[:3]
        inside = [e for e in events if e[0] == tid and e[3] == cat and e[1] <= ts and e[2] >= end]
        return sorted(inside, key=lambda e: (e[1], -(e[2] - e[1])))

    expected: dict[tuple, int] = {}
    for sync in syncs:
        frames = [f for f in enclosing(sync, "python_function") if "site-packages" not in f[4]]
        user = frames[-1][4] if frames else None
        ops = enclosing(sync, "cpu_op")
        op = None
        if ops:
            op = ops[0][4] if ops[0][4] == ops[-1][4] else f"{ops[0][4]} > {ops[-1][4]}"
        where = (user.split("(")[0], int(user.split("(")[1].split(")")[0])) if user else None
        key = (where, op)
        expected[key] = expected.get(key, 0) + 1
    report = trace_host.sync_report(_load(b, tmp_path))
    got: dict[tuple, int] = {}
    for site in report.sites:
        key = ((site.file, site.line) if site.file else None, site.ops)
        got[key] = got.get(key, 0) + site.count
    assert got == expected
    assert report.count == len(syncs) and report.has_stacks


def _analysis_peak_mb(path) -> float:
    """Peak RSS, in MB, of a fresh process that analyses ``path`` whole."""
    # VmHWM, not ru_maxrss: Linux carries a process's peak over exec, so a child of this
    # pytest process (torch imported) would start at its peak
    code = (
        "import sys\n"
        "from torchdoctor.analysis.trace_analysis import analyze_trace\n"
        "analyze_trace(sys.argv[1], jobs=1)\n"
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    return float(done.stdout.split()[-1]) / 1024


def _kineto_like(steps: int) -> TraceBuilder:
    """Steps of Python frames, ops, launches and kernels with the args torch.profiler writes
    (an event about 300 bytes of JSON, as in the traces it writes)."""
    b = TraceBuilder()
    op_args = {"Record function id": 0, "Ev Idx": 5, "Fwd thread id": 0, "Sequence number": 77}
    op_args |= {"Input Dims": [[64, 128], [128, 64]], "Input type": ["float", "float"]}
    kernel_args = {"device": 0, "context": 1, "registers per thread": 128, "shared memory": 0}
    kernel_args |= {"blocks per SM": 1.6, "warps per SM": 12.8, "grid": [80, 1, 1]}
    kernel_args |= {"block": [256, 1, 1], "est. achieved occupancy %": 38}
    for s in range(steps):
        t0 = 10_000.0 + s * 2_000.0
        b.step(s + 1, t0, 2_000.0)
        for k in range(40):
            t = t0 + k * 45.0
            b.python(f"train.py({20 + k % 5}): step", t, 40.0)
            b.host("aten::mm", t + 1, 30.0, **{"External id": s * 40 + k}, **op_args)
            b.launch(
                "cudaLaunchKernel",
                t + 2,
                8.0,
                f"sm80_xmma_gemm_{k % 7}",
                t + 12,
                40.0,
                **kernel_args,
            )
    return b


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's VmHWM")
def test_a_trace_is_analysed_in_well_under_its_size_of_memory(tmp_path):
    """A trace four times longer takes at most half a MB more memory per MB more of JSON to
    analyse (docs/analyze.md): 0.33 measured, 0.81 before the analyses' columns."""
    short = _kineto_like(steps=400).write(tmp_path / "short.json")
    long = _kineto_like(steps=1_600).write(tmp_path / "long.json")
    more_mb = (long.stat().st_size - short.stat().st_size) / 1e6
    assert more_mb > 40
    per_mb = (_analysis_peak_mb(long) - _analysis_peak_mb(short)) / more_mb
    assert per_mb <= MEMORY_PER_MB_OF_TRACE, f"{per_mb:.2f} MB per MB of trace"
