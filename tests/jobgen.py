"""Synthetic ranks of a distributed job: each rank's own record, as a rank would stream it."""

from __future__ import annotations

from torchdoctor.record import Environment, LoaderSettings, RunRecord


def rank_record(
    rank: int,
    data_wait: float,
    backward: float,
    no_sync: float | None,
    world_size: int = 2,
    host: str = "",
) -> RunRecord:
    """Ten identical steps of one rank; ``no_sync`` is its step with communication made free."""
    env = Environment(
        torch_version="2.4",
        python_version="3.11",
        platform="linux",
        device="cuda",
        device_name="gpu",
        clock="cuda events",
        torch_threads=4,
        cpu_logical=8,
        cpu_physical=4,
        world_size=world_size,
        rank=rank,
        local_rank=rank % 2,
        host=host,
    )
    record = RunRecord(env=env)
    parts = {
        "data_wait": data_wait,
        "to_device": 0.2,
        "forward": 2.0,
        "backward": backward,
        "optimizer": 1.0,
        "other": 0.5,
    }
    for _ in range(10):
        record.steps.add_step(parts, 1)
    if no_sync is not None:
        record.no_sync = [no_sync] * 10
    record.seen = {"batches": 10}
    record.loader = LoaderSettings("Images", 100, 8, 0, False, False, None, False, "Seq", "c")
    return record
