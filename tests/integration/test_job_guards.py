"""torchdoctor's own coordination never hangs a job, and never writes a checkpoint of replicas it
let drift (``capture._job_guards``): real jobs of ``tests/scenarios/ddp_train.py`` under Join,
with uneven and even inputs, and saving checkpoints through the communication-free phase."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid

import pytest

from distjobs import (
    JOB,
    QUICK,
    assert_no_orphans,
    default_sigint,
    env_with_src,
    job,
    torchdoctor_cmd,
)

pytestmark = pytest.mark.integration

#: A bound far beyond the job's own time: reaching it would mean a hang.
BOUNDED = (*QUICK, "--max-seconds", "150")


def test_a_join_job_with_uneven_inputs_ends_where_join_lets_every_rank_go(tmp_path):
    # rank 1: 48 samples, 6 batches; rank 0: 256 samples, 32 batches (DistributedSampler halves
    # each rank's own data set). Rank 1 runs out while its steps are measured.
    res, record, tag = job(tmp_path, "--join", "--rank1-samples", "96", "--epochs", "1",
                           flags=BOUNDED)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert record["status"] != "timed-out" and record["ending"]["cause"] == "uneven-join", (
        record["ending"], record["notes"])  # fmt: skip
    finding = record["findings"][0]
    assert finding["kind"] == "ddp.uneven-inputs" and finding["severity"] == "warning"
    assert finding["detail"]["joined_at"] == {"0": 32, "1": 6}
    assert "rank 1's data ran out after 6 steps, rank 0's after 32" in finding["title"]
    assert "mismatched collective" not in res.stdout
    assert "where Join let every rank go" in " ".join(res.stdout.split())
    assert {r["rank"] for r in record["distributed"]["ranks"]} == {0, 1}
    assert_no_orphans(tag)


def test_a_whole_run_of_a_join_job_with_uneven_inputs_goes_on_to_its_end(tmp_path):
    res, record, tag = job(tmp_path, "--join", "--rank1-samples", "96", "--epochs", "1",
                           flags=(*BOUNDED, "--whole"))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert (record["status"], record["ending"]["cause"]) == ("complete", "measured"), record[
        "notes"
    ]
    assert record["whole_run"]["steps"] == 32  # rank 0's every step, to the script's own end
    finding = record["findings"][0]
    assert finding["kind"] == "ddp.uneven-inputs" and finding["detail"]["joined_at"] == {
        "0": 32, "1": 6}  # fmt: skip
    assert_no_orphans(tag)


def test_ctrl_c_while_a_rank_waits_in_join_is_an_interruption_with_the_join_finding(tmp_path):
    # Rank 1 runs out at step 6 and waits in Join's loop; rank 0 (320000 samples) steps on,
    # its steps no longer logged. Ctrl-C comes after the stall rule's span (5 s) has passed
    # since either rank's last logged step: the job was held, not stalled.
    tag = uuid.uuid4().hex
    timing = tmp_path / "t"
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(
            torchdoctor_cmd(
                "run", "--nproc-per-node", "2", *BOUNDED, "--json", "r.json", "--", JOB,
                "--join", "--rank1-samples", "96", "--samples", "640000", "--epochs", "1",
                "--timing-file", str(timing), "--tag", tag,
            ),
            cwd=tmp_path, env=env_with_src(), stdout=out, stderr=err, text=True,
            preexec_fn=default_sigint,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                done = timing.with_suffix(".0")
                if done.exists() and len(done.read_text().split()) >= 40:
                    break
                time.sleep(0.2)
            time.sleep(6.5)
            assert proc.poll() is None, (tmp_path / "err").read_text()[-3000:]
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        finally:
            proc.kill()
    stdout = " ".join((tmp_path / "out").read_text().split())
    assert proc.returncode == 130, (tmp_path / "err").read_text()[-3000:]
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["status"] == "interrupted", (record["ending"], record["notes"])
    assert {r["rank"]: r["status"] for r in record["distributed"]["ranks"]} == {
        0: "interrupted", 1: "interrupted"}  # fmt: skip
    assert not [n for n in record["notes"] if "stalled" in n], record["notes"]
    finding = next(f for f in record["findings"] if f["kind"] == "ddp.uneven-inputs")
    assert finding["detail"]["joined_at"] == {"1": 6}
    assert finding["detail"]["going_at"]["0"] >= 40
    assert "rank 1's data ran out after 6 steps while rank 0 went on" in finding["title"]
    assert "stalled" not in stdout and "uneven inputs under Join" in stdout
    assert_no_orphans(tag)


def test_a_join_job_with_even_inputs_is_measured_as_any_job(tmp_path):
    # 4 batches a rank an epoch, every epoch under its own Join: the ranks run out together.
    res, record, tag = job(tmp_path, "--join", "--samples", "64", flags=BOUNDED)
    assert res.returncode == 0, res.stderr[-3000:]
    assert record["status"] == "complete", (record["ending"], record["notes"])
    assert not [f for f in record["findings"] if f["kind"] == "ddp.uneven-inputs"]
    for rank in record["distributed"]["ranks"]:
        assert len(rank["no_sync"]) == 6  # the communication-free phase ran on every rank
    assert_no_orphans(tag)


@pytest.mark.parametrize("how", ["dcp", "torch"])
def test_no_checkpoint_of_drifted_replicas_is_written(tmp_path, how):
    res, record, tag = job(
        tmp_path, "--save-every", "3", "--save-with", how, "--save-dir", str(tmp_path),
        flags=BOUNDED,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    # each rank's "step checksum" after each save it made (with torch.save, rank 0 alone saves;
    # rank 1 logs its checksum at the same steps, saving nothing)
    saves = [(tmp_path / f"saves.{r}").read_text().split() for r in (0, 1)]
    saved = dict(zip(saves[0][::2], saves[0][1::2], strict=True))
    other = dict(zip(saves[1][::2], saves[1][1::2], strict=True))
    assert len(saved) >= 3, saves  # saves before the communication-free phase happened
    assert len(list(tmp_path.glob("ckpt-*"))) == len(saved)
    drifted = {step for step in saved if other.get(step) != saved[step]}
    assert not drifted, f"checkpoints saved from replicas that had drifted apart: {drifted}"
    notes = " ".join(record["notes"])
    assert "stopped before the script's" in notes and "nothing was saved" in notes, notes
    assert record["status"] == "complete" and record["no_sync"], record["notes"]
    assert_no_orphans(tag)
