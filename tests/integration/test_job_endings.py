"""Jobs that end otherwise than by finishing their measurement, with real torchrun ranks: each
ending said right (docs/distributed.md, "How a job ends"), the rank that caused it named with its
step, no verdict from too few steps, and no blame where the data simply ran out."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from distjobs import (
    JOB,
    SLOW_SAMPLE_MS,
    assert_no_orphans,
    default_sigint,
    env_with_src,
    job,
    torchdoctor_cmd,
    wait_for_phase,
)

pytestmark = pytest.mark.integration

#: The issue's shape: 8 measured steps after 2 warmup steps.
FLAGS = ("--steps", "8", "--warmup", "2")


def ranks_of(record):
    return {r["rank"]: r for r in record["distributed"]["ranks"]}


def assert_backend_said(record):
    """The script called init_process_group("gloo"): whatever the ending, the job says so."""
    assert record["distributed"]["backend"] == "gloo"
    assert not any("never initialised" in n for n in record["notes"]), record["notes"]


def test_a_rank_that_raises_early_leads_the_report_and_gives_no_verdict(tmp_path):
    res, record, tag = job(tmp_path, "--raise-on-rank", "1", "--raise-at", "5", flags=FLAGS)
    assert res.returncode == 1, res.stderr[-3000:]
    assert record["status"] == "script-error"
    assert record["notes"][0] == (
        "rank 1 raised RuntimeError at step 5; the launcher then ended the other ranks"
    )
    ranks = ranks_of(record)
    assert "failed on purpose" in "".join(ranks[1]["error"])
    assert ranks[0]["error"] == [] and ranks[0]["ended"].startswith("ended when rank 1 did")
    # One measured step: not "the 2 ranks are balanced".
    verdict = record["verdict"]
    assert verdict["kind"] == "UNKNOWN", verdict
    assert verdict["why"].startswith("rank 1 raised RuntimeError at step 5")
    assert "too few" in verdict["why"] and "balanced" not in verdict["why"]
    out = " ".join(res.stdout.split())
    assert "rank 1 raised" in out and "failed on purpose" in out
    assert "_step_hooks.py" not in res.stdout + res.stderr, "torchdoctor's frames in a traceback"
    assert_backend_said(record)
    assert_no_orphans(tag)


def test_a_rank_out_of_memory_ends_the_job_out_of_memory_with_its_line(tmp_path):
    res, record, tag = job(tmp_path, "--oom-on-rank", "1", "--raise-at", "5", flags=FLAGS)
    assert res.returncode == 6, res.stdout[-3000:] + res.stderr[-3000:]
    assert record["status"] == "out-of-memory"
    assert record["notes"][0].startswith("rank 1 ran out of host memory at "), record["notes"]
    assert "ddp_train.py:" in record["notes"][0] and "asking for 1.0 PiB" in record["notes"][0]
    ranks = ranks_of(record)
    assert ranks[1]["status"] == "out-of-memory"
    assert ranks[0]["ended"].startswith("ended when rank 1 did"), ranks[0]["ended"]
    assert "uneven inputs" not in " ".join(record["notes"])
    assert_no_orphans(tag)


def test_data_that_runs_out_is_partial_with_no_blame(tmp_path):
    res, record, tag = job(tmp_path, "--epochs", "1", flags=("--steps", "3000", "--warmup", "2"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert record["status"] == "partial"
    assert not any("ended the job" in n or "launcher" in n for n in record["notes"])
    for rank in ranks_of(record).values():
        assert rank["ended"].endswith("(its data ran out)"), rank["ended"]
    assert_backend_said(record)
    assert_no_orphans(tag)


def test_uneven_inputs_are_named_with_the_sampler_and_join(tmp_path):
    # Rank 1 holds 96 samples, rank 0 512, and no DistributedSampler shares them out.
    res, record, tag = job(
        tmp_path, "--no-sampler", "--rank1-samples", "96", "--epochs", "1", flags=FLAGS
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert record["status"] == "partial"
    kinds = [f["kind"] for f in record["findings"]]
    assert kinds[0] == "ddp.uneven-inputs" and "ddp.no-distributed-sampler" in kinds, kinds
    uneven = record["findings"][0]
    assert uneven["title"].startswith("uneven inputs: rank 1 ran out of batches")
    assert "96 samples against 512" in uneven["title"]
    assert "DistributedSampler" in uneven["fix"] and "Join" in uneven["fix"]
    assert not any("torchdoctor itself failed" in n for n in record["notes"]), record["notes"]
    assert ranks_of(record)[0]["ended"].startswith("ended when rank 1 did")
    assert_backend_said(record)
    assert_no_orphans(tag)


def test_a_native_abort_is_named_by_its_signal(tmp_path):
    res, record, tag = job(tmp_path, "--abort-on-rank", "1", "--raise-at", "12", flags=FLAGS)
    assert res.returncode == 1, res.stderr[-3000:]
    assert record["status"] == "killed"
    ranks = ranks_of(record)
    assert ranks[1]["ended"].startswith("was killed by SIGABRT (signal 6"), ranks[1]["ended"]
    assert ranks[0]["ended"].startswith("ended when rank 1 did"), ranks[0]["ended"]
    assert record["notes"][0].startswith("rank 1 was killed by SIGABRT")
    assert_backend_said(record)
    assert_no_orphans(tag)


def test_a_rank_whose_process_exits_ends_the_job(tmp_path):
    res, record, tag = job(tmp_path, "--exit-on-rank", "0", "--raise-at", "6", flags=FLAGS)
    assert res.returncode == 1, res.stderr[-3000:]
    ranks = ranks_of(record)
    assert ranks[0]["status"] == "killed"
    assert ranks[0]["ended"].startswith("exited with status 3 without torchdoctor's last word")
    assert record["notes"][0].startswith("rank 0 exited with status 3")
    assert_no_orphans(tag)


@pytest.mark.timing
def test_collectives_called_by_hand_are_communication(tmp_path):
    # No DDP: the script all-reduces each gradient itself (dist.all_reduce(p.grad)).
    res, record, tag = job(
        tmp_path, "--manual-allreduce", "--hidden", "1024", flags=(*FLAGS, "--timeline", "t.json")
    )
    assert res.returncode == 0, res.stderr[-3000:]
    # --timeline in a job: a file per rank, each listed, each naming its rank as its process.
    for rank in (0, 1):
        path = tmp_path / f"t.rank{rank}.json"
        assert f"timeline written to {path} (open it in ui.perfetto.dev)" in res.stdout
        names = [e["args"]["name"] for e in json.loads(path.read_text())["traceEvents"]
                 if e["name"] == "process_name"]  # fmt: skip
        assert len(names) == 1 and names[0].startswith(f"rank {rank}: "), names
    job_ = record["distributed"]
    for rank in job_["ranks"]:
        assert rank["collectives_ms"] > 0 and len(rank["no_sync"]) == 8, rank
    assert record["verdict"]["kind"] == "COMMUNICATION-BOUND", record["verdict"]
    assert "DistributedDataParallel" in record["verdict"]["next"]
    assert job_["comm_ceiling"] > 1.0
    manual = next(f for f in record["findings"] if f["kind"] == "ddp.manual-collectives")
    source = Path(JOB).read_text().splitlines()[manual["line"] - 1]
    assert "dist.all_reduce(p.grad)" in source, source
    assert_no_orphans(tag)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_every_rank_with_the_same_words(tmp_path, signum):
    tag = uuid.uuid4().hex
    proc = subprocess.Popen(
        torchdoctor_cmd(
            "run", "--nproc-per-node", "2", "--steps", "200", "--warmup", "2", "--json", "r.json",
            "--", JOB, "--slow-rank", "1", "--getitem-ms", SLOW_SAMPLE_MS, "--tag", tag,
        ),
        cwd=tmp_path, env=env_with_src(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        wait_for_phase(proc, "measuring")
        time.sleep(2.0)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-3000:]
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["status"] == "interrupted"
    assert 0 < record["measured_steps"] < 200
    name = signal.Signals(signum).name
    assert record["notes"][0] == f"stopped by torchdoctor on {name} (signal {int(signum)})"
    for rank in ranks_of(record).values():
        assert rank["ended"].startswith(f"stopped by torchdoctor on {name}"), rank["ended"]
    assert "Traceback" not in err, "the launcher's or a rank's traceback"
    assert_no_orphans(tag)


def test_a_stalled_rank_is_named_with_its_line_and_step(tmp_path):
    # Rank 1 sleeps at step 8 (after 2 warmup and some measured steps); rank 0 then waits in
    # DDP's all-reduce until the bound.
    res, record, tag = job(
        tmp_path, "--hang-on-rank", "1", "--raise-at", "8",
        flags=("--steps", "20", "--warmup", "2", "--max-seconds", "20"),
    )  # fmt: skip
    assert res.returncode == 5, res.stderr[-3000:]
    assert record["status"] == "timed-out"
    line = next(i for i, text in enumerate(Path(JOB).read_text().splitlines(), 1)
                if "time.sleep(3600)" in text)  # fmt: skip
    stall = record["notes"][0]
    assert stall.startswith("the job stalled: rank 1 stopped stepping at step 8, at "), stall
    assert f"ddp_train.py:{line} in one_epoch" in stall and "rank(s) 0 waited" in stall
    assert (
        record["verdict"]["why"].startswith("the job stalled")
        and "balanced" not in (record["verdict"]["why"])
    )
    ranks = ranks_of(record)
    assert ranks[0]["in_collective"] and not ranks[1]["in_collective"]
    assert "Ended" in res.stdout and "the job stalled" in res.stdout
    assert_no_orphans(tag)
