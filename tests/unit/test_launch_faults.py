"""Which rank ended a launched job (``_launch._first_failure``), from what each rank streamed."""

from __future__ import annotations

from torchdoctor.process.launch import _first_failure
from torchdoctor.process.stream import StreamState

PEER_LOST = ["RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer\n"]


def rank(n: int, status: str | None, at: float, traceback: list[str] | None = None) -> StreamState:
    """A rank's stream: its last word (``status`` None: none came) and when it ended."""
    state = StreamState(hello={"rank": n, "local_rank": n, "world_size": 2, "pid": 1})
    if status is None:
        state.closed_at = at
    else:
        state.final = {"record": {"status": status}, "traceback": traceback or []}
        state.final_at = at
    return state


def test_the_rank_that_raised_is_blamed_not_the_one_whose_collective_lost_it():
    states = [rank(0, "script-error", 1.0, PEER_LOST), rank(1, "script-error", 2.0, ["ValueError"])]
    assert _first_failure(states) == 1


def test_a_killed_rank_whose_stream_closed_late_is_still_the_cause():
    # Its DataLoader worker held the socket a while after the rank died.
    states = [rank(0, "script-error", 2.0, PEER_LOST), rank(1, None, 5.0)]
    assert _first_failure(states) == 1


def test_a_rank_that_exited_early_ends_the_job():
    states = [rank(0, "script-error", 2.0, PEER_LOST), rank(1, "partial", 1.5)]
    assert _first_failure(states) == 1


def test_the_earliest_cause_wins_and_a_complete_job_has_none():
    assert _first_failure([rank(0, None, 3.0), rank(1, "script-error", 2.0, ["KeyError"])]) == 1
    assert _first_failure([rank(0, "complete", 1.0), rank(1, "complete", 1.0)]) is None
    # Only followers (every rank lost its peer): the earliest of them.
    assert _first_failure([rank(0, "script-error", 3.0, PEER_LOST),
                           rank(1, "script-error", 2.0, PEER_LOST)]) == 1  # fmt: skip
