"""A launched rank's guards, in one process: the agreement's reading of ranks that ran out under
Join, and no checkpoint written while the replicas drift (``capture._job_guards``)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch

from torchdoctor.analysis.job_findings import join_finding
from torchdoctor.capture import StopRun
from torchdoctor.capture._job_guards import guard_job
from torchdoctor.capture._patch import Patcher
from torchdoctor.capture._ranks import Ranks
from torchdoctor.process.ending import ScriptEnd, decide_script
from torchdoctor.record import COMPLETE, PARTIAL, RankEnv, phase_names


def _ranks() -> Ranks:
    return Ranks(timeout_s=5, env=RankEnv(rank=0, world_size=2))


def _reduced(*votes: torch.Tensor) -> torch.Tensor:
    """What an all-reduce with MIN leaves of the ranks' votes."""
    return torch.stack(votes).min(dim=0).values


def _vote(joined_at: int | None, wanted: bool = True) -> torch.Tensor:
    ranks = _ranks()
    ranks._join_step = joined_at
    return ranks._vote(wanted)


def test_a_rank_that_ran_out_before_the_others_is_uneven_inputs():
    ranks = _ranks()
    ranks._read(_reduced(_vote(None), _vote(30, wanted=False)))
    assert ranks.uneven_join and ranks.first_join_step == 30
    assert ranks.joined_at is None  # this rank (the one that went on) has not run out yet


def test_ranks_that_ran_out_at_different_steps_are_uneven_inputs():
    ranks = _ranks()
    ranks._join_step = 80
    ranks._read(_reduced(_vote(80, wanted=False), _vote(30, wanted=False)))
    assert ranks.uneven_join and ranks.first_join_step == 30 and ranks.joined_at == 80


def test_ranks_that_ran_out_together_are_even_inputs():
    ranks = _ranks()
    ranks._join_step = 4
    ranks._read(_reduced(_vote(4, wanted=False), _vote(4, wanted=False)))
    assert not ranks.uneven_join and ranks.joined_at is None
    ranks._read(_reduced(_vote(None), _vote(None)))
    assert not ranks.uneven_join


def test_after_an_uneven_join_no_phase_is_agreed_and_no_collective_is_called():
    ranks = _ranks()
    ranks.uneven_join = True
    ranks._group = object()  # a collective on it would fail: agree must not call one
    assert ranks.agree(True) is False


def test_the_join_finding_names_who_ran_out_first_and_for_how_long_it_waited():
    finding = join_finding({0: 80, 1: 30}, {0: 640, 1: 240}, "train.py:14")
    assert finding is not None and finding.kind == "ddp.uneven-inputs"
    assert finding.severity == "warning" and (finding.file, finding.line) == ("train.py", 14)
    assert "rank 1's data ran out after 30 steps, rank 0's after 80" in finding.title
    assert "(240 samples against 640)" in finding.title
    assert "waited in Join for the last 50 steps (62% of the job's)" in finding.title
    assert "DistributedSampler" in finding.fix
    assert join_finding({0: 4, 1: 4}, {}, None) is None
    assert join_finding({1: 30}, {}, None) is None


def test_a_job_stopped_while_a_rank_waited_in_join_is_told_with_the_steps_of_the_rank_going_on():
    # Ctrl-C or the bound while rank 1 waited in Join's loop and rank 0 still stepped
    finding = join_finding({1: 6}, {0: 320000, 1: 48}, "train.py:14", going={0: 806})
    assert finding is not None and finding.severity == "warning"
    assert (
        "rank 1's data ran out after 6 steps while rank 0 went on: it was at step 806 when the "
        "job was stopped (48 samples against 320000)" in finding.title
    )
    assert "waited in Join for at least the last 800 steps (99% of the job's so far)" in (
        finding.title
    )
    assert finding.detail == {"joined_at": {"1": 6}, "going_at": {"0": 806}}
    # a rank stopped at or before the step the other ran out at tells nothing
    assert join_finding({1: 6}, {}, None, going={0: 6}) is None
    assert join_finding({}, {}, None, going={0: 806}) is None


@pytest.mark.parametrize(
    ("ended", "phase", "status", "cause"),
    [
        ("stopped", phase_names.MODEL_ALONE, PARTIAL, "uneven-join"),  # cut short at Join's exit
        ("stopped", phase_names.DONE, COMPLETE, "measured"),
        ("finished", phase_names.WHOLE, COMPLETE, "script-end"),  # a whole run goes on to its end
    ],
)
def test_a_rank_of_a_job_whose_data_ran_out_under_join_unevenly(ended, phase, status, cause):
    ending = decide_script(
        ScriptEnd(
            ended=ended,
            measured_steps=6,
            phase=phase,
            uneven_join=True,
            whole_steps=80 if phase == phase_names.WHOLE else None,
        )  # fmt: skip
    )
    assert (ending.status, ending.cause) == (status, cause)


def _session(drifting: bool) -> SimpleNamespace:
    ranks = _ranks()  # launched, but no process group: stop_now calls no collective
    ranks.drifting = drifting
    return SimpleNamespace(
        patcher=Patcher(), ranks=ranks, data=SimpleNamespace(notes=[], seen={}),
        options=SimpleNamespace(stop=True),
    )  # fmt: skip


def test_no_checkpoint_is_written_while_the_replicas_drift(tmp_path):
    original = torch.save
    session = _session(drifting=True)
    guard_job(session)  # type: ignore[arg-type]
    try:
        with pytest.raises(StopRun):
            torch.save({"w": torch.ones(2)}, tmp_path / "ckpt.pt")
        with pytest.raises(StopRun), open(tmp_path / "opened.pt", "wb") as f:
            torch.save({"w": torch.ones(2)}, f)
        assert not (tmp_path / "ckpt.pt").exists()
        assert (tmp_path / "opened.pt").stat().st_size == 0
        assert "stopped before the script's torch.save at" in session.data.notes[0]
        torch.save({"w": torch.ones(2)}, io.BytesIO())  # a buffer in memory is no checkpoint
        session.ranks.drifting = False
        torch.save({"w": torch.ones(2)}, tmp_path / "synced.pt")
        assert (tmp_path / "synced.pt").exists()
    finally:
        session.patcher.restore()
    assert torch.save is original
