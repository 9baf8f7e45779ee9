"""torchrun's environment is read in one place, into a value a test can build directly."""

from __future__ import annotations

import pytest

from torchdoctor.capture._ranks import Ranks
from torchdoctor.record import RankEnv


def test_a_lone_process_is_rank_0_of_1_and_not_under_torchrun():
    env = RankEnv.from_environ({"PATH": "/usr/bin"})
    assert env == RankEnv(rank=0, local_rank=0, world_size=1, nnodes=1, under_torchrun=False)
    assert not env.launched


def test_a_rank_of_a_job_reads_every_variable():
    env = RankEnv.from_environ(
        {
            "RANK": "3",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "4",
            "GROUP_WORLD_SIZE": "2",
            "TORCHELASTIC_RUN_ID": "none",
        }
    )
    assert env == RankEnv(rank=3, local_rank=1, world_size=4, nnodes=2, under_torchrun=True)
    assert env.launched


@pytest.mark.parametrize(
    ("environ", "under"),
    [
        ({"LOCAL_RANK": "0"}, True),  # a job of one rank is still torchrun's
        ({"TORCHELASTIC_RUN_ID": "abc"}, True),
        ({"TORCHELASTIC_RUN_ID": ""}, False),
        ({"RANK": "0", "WORLD_SIZE": "1"}, False),  # set by hand, not by torchrun's agent
    ],
)
def test_under_torchrun_is_told_by_the_agents_variables(environ, under):
    env = RankEnv.from_environ(environ)
    assert env.under_torchrun is under
    assert not env.launched  # one rank: nothing to coordinate


def test_a_malformed_number_is_the_lone_process_default_not_an_error():
    env = RankEnv.from_environ({"RANK": "", "WORLD_SIZE": "two", "GROUP_WORLD_SIZE": "x"})
    assert (env.rank, env.world_size, env.nnodes) == (0, 1, 1)


def test_detect_reads_this_process_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert RankEnv.detect() == RankEnv(rank=1, world_size=2)


def test_the_capture_takes_the_value_it_is_given():
    # A test of a job's second rank builds the value; nothing reads os.environ behind it.
    ranks = Ranks(timeout_s=1.0, env=RankEnv(rank=1, local_rank=1, world_size=2))
    assert (ranks.rank, ranks.local_rank, ranks.world_size) == (1, 1, 2)
    assert ranks.launched
    assert not Ranks(timeout_s=1.0, env=RankEnv()).launched
