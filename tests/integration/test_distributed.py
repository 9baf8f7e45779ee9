"""Distributed jobs for real: ranks launched by torch.distributed.run, gloo on CPU, one report.

Each test runs the command a user types (``torchdoctor run --nproc-per-node 2 ...``, or torchrun
running ``-m torchdoctor run``) on ``tests/scenarios/ddp_train.py``: a small DDP job whose costs
and mistakes are injected per rank (a rank with slow samples, a rank that raises or exits).
Every test also checks that no process of the job outlives the command. The machine has two
cores, so each rank runs one thread and the model is small.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from distjobs import JOB, QUICK, SLOW_SAMPLE_MS, SRC, assert_no_orphans, job, run, torchdoctor_cmd

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def straggler_job(tmp_path_factory):
    """One job where rank 1's samples are slow: its output and its record."""
    return job(tmp_path_factory.mktemp("straggler"), "--slow-rank", "1", "--getitem-ms",
               SLOW_SAMPLE_MS)  # fmt: skip


@pytest.mark.timing
def test_straggler_is_named_and_the_job_is_input_bound(straggler_job):
    res, record, tag = straggler_job
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("Verdict") == 1, "one report for the job, not one per rank"
    job = record["distributed"]
    assert job["world_size"] == 2 and job["bounding_rank"] == 1
    assert record["verdict"]["kind"] == "INPUT-BOUND"
    assert record["verdict"]["why"].startswith("rank 1 is a straggler")
    (straggler,) = job["stragglers"]
    assert straggler["rank"] == 1 and straggler["victims"] == [0]
    assert straggler["part"] == "data_wait"
    roles = {r["rank"]: r["role"] for r in job["ranks"]}
    assert roles == {0: "waits", 1: "straggler"}
    # Communication made free on both ranks: the waiting rank's wait is its communication.
    for rank in job["ranks"]:
        assert len(rank["no_sync"]) == 6 and rank["status"] == "complete"
    waiting = job["ranks"][0]
    assert waiting["comm_ms"] > 0.5 * straggler["excess_ms"]
    assert job["comm_ceiling"] is not None and job["scaling_efficiency"] is not None
    assert record["findings"][0]["kind"] == "straggler"
    assert_no_orphans(tag)


@pytest.mark.timing
def test_straggler_report_names_the_ranks(straggler_job):
    res, _, _ = straggler_job
    out = " ".join(res.stdout.split())
    assert "job: 2 ranks on 1 node(s)" in out
    assert "rank 1 is a straggler" in out
    assert "step breakdown of rank 1 (the straggler)" in out


@pytest.mark.timing
def test_balanced_job_has_no_straggler_and_its_mistakes_are_found(tmp_path):
    # DDP built as DistributedDataParallel(module=model, ...), as Lightning builds it.
    res, record, tag = job(
        tmp_path, "--no-sampler", "--find-unused", "--accumulate", "2", "--hidden", "1024",
        "--module-keyword",
        flags=("--steps", "8", "--warmup", "2"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = [(r["rank"], r["own_ms"], r["step_ms"] and r["step_ms"]["mean"], r["no_sync"])
             for r in record["distributed"]["ranks"]]  # fmt: skip
    assert record["distributed"]["stragglers"] == [], ranks
    assert "straggler" not in record["verdict"]["why"]
    kinds = {f["kind"] for f in record["findings"]}
    assert {
        "ddp.no-distributed-sampler",
        "ddp.find-unused-parameters",
        "ddp.accumulation-sync",
    } <= kinds, (kinds, record["notes"])
    sampler = next(f for f in record["findings"] if f["kind"] == "ddp.no-distributed-sampler")
    assert sampler["file"].endswith("ddp_train.py") and sampler["line"]
    assert_no_orphans(tag)


def test_two_nodes_through_the_c10d_rendezvous(tmp_path):
    """Two torchdoctor commands, one rank each, meet at a rendezvous on 127.0.0.1."""
    tag = uuid.uuid4().hex
    endpoint = f"127.0.0.1:{_free_port()}"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    nodes = [
        subprocess.Popen(
            torchdoctor_cmd(
                "run",
                "--nproc-per-node",
                "1",
                "--nnodes",
                "2",
                "--rdzv-endpoint",
                endpoint,
                *QUICK,
                "--quiet",
                "--json",
                f"node{i}.json",
                "--",
                JOB,
                "--tag",
                tag,
            ),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    outs = [node.communicate(timeout=240) for node in nodes]
    assert [n.returncode for n in nodes] == [0, 0], [err[-2000:] for _, err in outs]
    written = sorted(tmp_path.glob("node*.json"))
    assert len(written) == 1, "only the node that hosts rank 0 writes the job's record"
    reported = [out for out, _ in outs if "Verdict" in out]
    assert len(reported) == 1, "one report for the job"
    record = json.loads(written[0].read_text())
    job = record["distributed"]
    assert job["world_size"] == 2 and job["nnodes"] == 2
    assert sorted(r["rank"] for r in job["ranks"]) == [0, 1]
    assert_no_orphans(tag)


@pytest.mark.timing
def test_torchrun_running_torchdoctor_gives_one_report_for_fsdp2(tmp_path):
    """``torchrun -m torchdoctor run`` works the same; FSDP2 (fully_shard) runs on CPU too."""
    tag = uuid.uuid4().hex
    res = run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            "2", "-m", "torchdoctor", "run", *QUICK, "--json", "r.json", "--", JOB, "--fsdp",
            "--slow-rank", "0", "--getitem-ms", SLOW_SAMPLE_MS, "--tag", tag,
        ],
        tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("Verdict") == 1
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["verdict"]["kind"] == "INPUT-BOUND"
    assert record["distributed"]["stragglers"][0]["rank"] == 0
    # FSDP2 has no DDP no_sync(): the wait is estimated from the ranks' backward and forward.
    assert all(r["no_sync"] == [] for r in record["distributed"]["ranks"])
    assert any("communication-free phase skipped" in n for n in record["notes"])
    assert_no_orphans(tag)


@pytest.mark.timing
def test_a_sharded_job_is_communication_bound_with_the_collectives_fsdp2_issued(tmp_path):
    """FSDP2 (two fully_shard units, gloo): no no-sync phase, its all-gathers and reduce-scatters
    timed where the step waits for them, by kind and bytes."""
    res, record, tag = job(tmp_path, "--fsdp")
    assert res.returncode == 0, res.stderr[-3000:]
    kinds = record["torch_collective_kinds"]
    # each unit: one all-gather before its forward, one before its backward (resharded after
    # forward), one reduce-scatter after its backward
    assert (kinds["all_gather"]["calls"], kinds["reduce_scatter"]["calls"]) == (4.0, 2.0)
    assert kinds["all_gather"]["bytes"] == 4 * kinds["reduce_scatter"]["bytes"] / 2
    for rank in record["distributed"]["ranks"]:
        assert rank["no_sync"] == [] and rank["comm_ms"] == pytest.approx(
            rank["torch_collectives_ms"], abs=1e-3)  # fmt: skip
    assert record["verdict"]["kind"] == "COMMUNICATION-BOUND", record["verdict"]
    assert "all-gathers" in record["verdict"]["why"]
    assert "reshard_after_forward=False" in record["verdict"]["next"]
    assert_no_orphans(tag)


def test_a_sharded_job_that_keeps_its_parameters_gathered_is_not_told_to(tmp_path):
    """FSDP2 units with reshard_after_forward=False and a bf16 MixedPrecisionPolicy: one
    all-gather per unit a step, and the settings read off the units for the advice."""
    res, record, tag = job(tmp_path, "--fsdp", "--fsdp-keep", "--fsdp-bf16")
    assert res.returncode == 0, res.stderr[-3000:]
    seen = record["seen"]
    assert (seen["fsdp_units"], seen["fsdp_kept_after_forward"]) == (2, 2)
    assert seen["fsdp_param_dtype"] == "bfloat16"
    assert record["torch_collective_kinds"]["all_gather"]["calls"] == 2.0
    assert "reshard_after_forward=False" not in record["verdict"]["next"]
    assert "MixedPrecisionPolicy" not in record["verdict"]["next"]
    assert_no_orphans(tag)


@pytest.mark.timing
def test_ddps_all_reduce_is_made_free_beside_an_all_gather_the_script_reads(tmp_path):
    """A loss all-gathered every step to log it cannot return at once: it runs for real in the
    no-sync steps, timed and taken out of each; DDP's all-reduce is made free as always."""
    res, record, tag = job(tmp_path, "--gather-loss")
    assert res.returncode == 0, res.stderr[-3000:]
    assert any("all_gather cannot return at once" in n for n in record["notes"]), record["notes"]
    for rank in record["distributed"]["ranks"]:
        assert len(rank["no_sync"]) == 6, rank
        # communication: DDP's all-reduce and the all-gather, not the all-gather alone
        assert rank["comm_ms"] > rank["collectives_ms"] > 0, rank
    assert_no_orphans(tag)


def test_what_the_projection_takes_from_a_job_is_the_same_on_2_and_4_ranks(tmp_path):
    """The projection to more ranks keeps each step's collectives, calls and bytes, as measured:
    the same FSDP2 job on 2 and on 4 ranks issues the same (compared here: counts and bytes,
    not times; 4 ranks on 2 cores are slow)."""
    records = {}
    for n in (2, 4):
        tag = uuid.uuid4().hex
        res = run(torchdoctor_cmd("run", "--nproc-per-node", str(n), *QUICK, "--json",
                                  f"r{n}.json", "--", JOB, "--fsdp", "--tag", tag), tmp_path)  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        records[n] = json.loads((tmp_path / f"r{n}.json").read_text())
        assert_no_orphans(tag)
    two, four = (records[n]["torch_collective_kinds"] for n in (2, 4))
    assert set(two) == set(four) == {"all_gather", "reduce_scatter"}
    for kind in two:
        assert two[kind]["calls"] == four[kind]["calls"], (two, four)
        assert two[kind]["bytes"] == pytest.approx(four[kind]["bytes"], rel=0.01), (two, four)
    projected = [records[n]["distributed"]["projection"] for n in (2, 4)]
    assert sorted(projected[0]["collectives"]) == sorted(projected[1]["collectives"])
    assert [s["ranks"] for s in projected[0]["scales"]] == [8, 64, 512]
    # on another link, from the saved record
    again = run(torchdoctor_cmd("report", "r2.json", "--link", "200:8"), tmp_path)
    assert again.returncode == 0, again.stderr
    assert "projected to more ranks on 200:8 (given)" in " ".join(again.stdout.split())
    bad = run(torchdoctor_cmd("report", "r2.json", "--link", "fast"), tmp_path)
    assert bad.returncode == 2 and "nvlink, infiniband, ethernet" in bad.stderr, bad.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DATA_PARALLEL = """
import torch
from torch import nn

model = nn.DataParallel(nn.Linear(8, 2))  # on CPU it calls the module directly
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8)), 8)
for epoch in range(100):
    for (x,) in loader:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
"""


def test_data_parallel_is_found_at_its_line_in_one_process(tmp_path):
    from torchdoctor.options import RunOptions
    from torchdoctor.process import Target, run_target

    script = tmp_path / "dp.py"
    script.write_text(DATA_PARALLEL)
    outcome = run_target(Target(script=str(script)), RunOptions(steps=3, warmup=1))
    (finding,) = [f for f in outcome.record.findings if f.kind == "ddp.data-parallel"]
    assert (Path(finding.file).name, finding.line) == ("dp.py", 5)
    assert "DistributedDataParallel" in finding.fix
    assert outcome.record.distributed is None


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--nnodes", "2"], {}, "--nnodes, --node-rank and --rdzv-endpoint launch a job"),
        (["--nproc-per-node", "2", "--nnodes", "2"], {}, "needs the rendezvous"),
        (["--nproc-per-node", "2", "--nnodes", "0"], {}, "is not a number of nodes"),
        (
            [
                "--nproc-per-node",
                "2",
                "--nnodes",
                "2",
                "--node-rank",
                "5",
                "--rdzv-endpoint",
                "127.0.0.1:1",
            ],
            {},
            "--node-rank 5 in a job of 2",
        ),  # fmt: skip
        (["--nproc-per-node", "2", "--fix"], {}, "--fix is not available"),
        (["--nproc-per-node", "2", "--try", "amp"], {}, "--try is not available"),
        (["--nproc-per-node", "2"], {"LOCAL_RANK": "0"}, "inside a rank of a job torchrun"),
    ],
)
def test_launch_flags_that_cannot_work_are_usage_errors(
    flags, env, message, tmp_path, monkeypatch, capsys
):
    from torchdoctor.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    assert main(["run", *flags, "--", JOB]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err and "fix:" in err and "Traceback" not in err
