"""The system sampler sees CPU load and worker memory, and its thread always stops."""

from __future__ import annotations

import time

from torchdoctor.capture._sampler import SystemSampler


def test_short_busy_run_reports_cpu_load():
    sampler = SystemSampler(interval_s=0.05)
    sampler.start()
    end = time.perf_counter() + 0.3
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
