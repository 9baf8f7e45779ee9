"""The system sampler sees CPU load and worker memory, and its thread always stops."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from torchdoctor.capture._sampler import SystemSampler
from torchdoctor.record import MIN_CPU_WINDOW_S


def test_short_busy_run_reports_cpu_load():
    sampler = SystemSampler(interval_s=0.05)
    sampler.start()
    end = time.perf_counter() + 2 * MIN_CPU_WINDOW_S
    x = 0
    while time.perf_counter() < end:  # one core busy
        x += 1
    usage = sampler.stop()
    assert usage.samples >= 2
    assert max(usage.cpu_percent_per_core) > 20.0
    assert usage.main_rss_mb_max > 10


def test_run_shorter_than_one_interval_still_gets_a_sample():
    sampler = SystemSampler(interval_s=10.0)
    sampler.start()
    usage = sampler.stop()
    assert usage.samples == 1
    assert usage.main_rss_mb_max > 10
    # A few ms are a tick or none of the CPU counters: no share is told, busy machine or not.
    assert usage.cpu_percent_per_core == [] and usage.cpu_percent_total is None
    assert usage.others_cpu_cores is None


def test_a_sampler_stopped_before_it_started_tells_memory_and_no_cpu_share():
    # The script failed before its measured steps: the session stops a sampler that never ran.
    # With no window, the machine's busy time since boot is no figure of the run.
    usage = SystemSampler().stop()
    assert usage.samples == 1 and usage.main_rss_mb_max > 10
    assert usage.cpu_percent_per_core == [] and usage.cpu_percent_total is None
    assert usage.others_cpu_cores is None


def test_a_window_too_short_for_the_counters_says_so_in_the_report():
    from jobgen import rank_record
    from torchdoctor.analysis.verdict import summarise
    from torchdoctor.record import SystemUsage
    from torchdoctor.report.terminal import render

    record = rank_record(0, 1.0, 3.0, None, world_size=1)
    record.system = SystemUsage(0.2, 1, [], None, 300.0, 0, 0.0)
    summarise(record)
    console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
    render(record, console)
    text = console.export_text()
    (line,) = [x.strip() for x in text.splitlines() if x.startswith("cpu ")]
    told = (
        f"not told per core: the measured steps took under {MIN_CPU_WINDOW_S:g} s, too short "
        "for the system's CPU counters"
    )
    assert line.split(maxsplit=1)[1] == told  # and no load: none was measured
    assert "(mean over" not in text and "busy" not in record.verdict.why
    # the load taken over the run around them instead is said with its window
    record.system = SystemUsage(
        0.2, 1, [], None, 300.0, 0, 0.0, others_cpu_cores=1.2, others_window_s=3.4
    )
    text = render_text(record)
    assert f"{told}; other processes took 1.2 cores over 3.4 s of the run around them" in text


def render_text(record) -> str:
    from torchdoctor.report.terminal import render

    console = Console(width=250, file=io.StringIO(), record=True, color_system=None)
    render(record, console)
    return console.export_text()


@pytest.mark.slow
def test_steps_too_short_for_the_counters_take_the_load_over_the_run_so_far():
    from hog import start_hog, stop_hog

    hog = start_hog()
    try:
        sampler = SystemSampler(interval_s=0.1)  # capture begins
        time.sleep(1.0)  # the script's start, beside the hog
        sampler.start()
        time.sleep(0.05)  # steps far too short for the counters
        usage = sampler.stop()
    finally:
        stop_hog(hog)
    assert usage.cpu_percent_per_core == []
    assert usage.others_window_s >= 1.0 and usage.others_cpu_cores >= 0.6, usage


@pytest.mark.slow
@pytest.mark.timing  # this process's busy loop must get part of a core: beside two other
# workers' end-to-end tests (make test's first pass) it once got 0.28 of one
def test_other_processes_cpu_is_told_from_the_scripts_own():
    # This process busy: its own CPU, not the machine's load.
    sampler = SystemSampler(interval_s=0.1)
    sampler.start()
    end, x = time.perf_counter() + 1.0, 0
    while time.perf_counter() < end:
        x += 1
    own = sampler.stop()
    # Another process busy while this one sleeps: the machine is busy. The hog is no child of
    # this process (a child would be the script's own, e.g. a DataLoader worker).
    busy = _sampled_beside_a_hog(1.5)
    assert busy.others_cpu_cores >= 0.6, busy.others_cpu_cores
    # The machine's busy cores less the others' leave this process's busy loop (whatever else
    # runs beside the test, the loop got a good part of a core).
    machine = own.cpu_percent_total / 100 * len(own.cpu_percent_per_core)
    assert machine - own.others_cpu_cores >= 0.4, own


def test_a_busy_machine_is_said_in_the_verdict():
    from jobgen import rank_record
    from torchdoctor.analysis.verdict import summarise
    from torchdoctor.record import SystemUsage

    record = rank_record(0, 1.0, 3.0, None, world_size=1)
    record.env.cpu_logical = 2
    record.system = SystemUsage(0.2, 5, [90.0, 95.0], 92.5, 300.0, 0, 0.0, others_cpu_cores=0.9)
    summarise(record)
    assert "the machine was busy: other processes took 0.9 of its 2 cores" in record.verdict.why
    record.system.others_cpu_cores = 0.1
    summarise(record)
    assert "busy" not in record.verdict.why


@pytest.mark.timing  # the hog must get a good part of a core during the window
def test_a_workers_cpu_before_the_window_is_not_taken_from_the_others_load():
    # A DataLoader worker (a child: the script's own) that worked before the measured steps,
    # and another process busy during them: what the worker did before must not count against
    # the window (read from zero, it once made a busy machine's load read 0.0 cores).
    from hog import spinning_child

    worker = spinning_child(1.5)
    try:
        assert worker.stdout.readline().strip() == "spun"
        busy = _sampled_beside_a_hog(1.0)
    finally:
        worker.kill()
        worker.wait()
    assert busy.others_cpu_cores >= 0.5, busy


def _sampled_beside_a_hog(window_s: float):
    """What the sampler tells of a ``window_s`` window while the hog (no child of this process:
    another process's load) keeps a core busy and this process sleeps."""
    from hog import start_hog, stop_hog

    hog = start_hog()
    try:
        time.sleep(0.5)  # the hog is running
        sampler = SystemSampler(interval_s=0.1)
        sampler.start()
        time.sleep(window_s)
        return sampler.stop()
    finally:
        stop_hog(hog)
