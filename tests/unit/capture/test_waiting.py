"""The script's threads' work and their time waiting for a core, from the kernel's run-queue
figures (``capture._waiting``): more processes spinning than there are cores must wait, and the
sampler puts what they waited into the record."""

from __future__ import annotations

import os
import threading
import time

import pytest

from hog import spin, spinning_child
from torchdoctor.capture._sampler import SystemSampler
from torchdoctor.capture._waiting import WaitWatch

pytestmark = pytest.mark.skipif(
    not os.path.exists(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/schedstat"),
    reason="the kernel's run-queue figures are Linux's (/proc/<pid>/task/<tid>/schedstat)",
)

#: Each spinner's own CPU seconds: one more spinner than cores makes them wait, together, at
#: least this much (n + 1 spinners need (n + 1) * CPU s over n cores).
CPU_S = 0.5


def test_children_that_outnumber_the_cores_are_seen_waiting_for_them():
    cores = len(os.sched_getaffinity(0))
    children = [spinning_child(CPU_S) for _ in range(cores + 1)]
    watch = WaitWatch()
    started = time.monotonic()
    try:
        watch.start([c.pid for c in children])
        spin(0.2)  # the training thread's own work
        for child in children:
            assert child.stdout.readline().strip() == "spun"
        waits = watch.stop([c.pid for c in children], set(), time.monotonic() - started)
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert waits is not None
    # (cores + 1) spinners of CPU_S each on `cores` cores: together they waited at least
    # CPU_S * (cores + 1) / cores - CPU_S each beyond their own CPU; ask for well under that.
    assert waits.threads_waited_s >= 0.5 * CPU_S / cores, waits
    assert waits.threads_cpu_s >= (cores + 1) * CPU_S * 0.9 + 0.2 * 0.9, waits
    assert waits.training_cpu_s >= 0.2 * 0.9, waits


def test_torchdoctors_own_threads_are_left_out():
    counted, left_out = WaitWatch(), WaitWatch()
    ours: list[int] = []
    spun, done = threading.Event(), threading.Event()

    def work() -> None:
        ours.append(threading.get_native_id())
        spin(0.3)
        spun.set()
        done.wait()  # alive when the figures are read

    counted.start([])
    left_out.start([])
    thread = threading.Thread(target=work)
    thread.start()
    spun.wait()
    with_it, without = counted.stop([], set(), 1.0), left_out.stop([], set(ours), 1.0)
    done.set()
    thread.join()
    assert with_it.threads_cpu_s >= 0.3 * 0.9, with_it
    assert without.threads_cpu_s < with_it.threads_cpu_s - 0.3 * 0.9, (without, with_it)


def test_the_sampler_puts_the_waiting_in_the_record():
    sampler = SystemSampler(interval_s=0.05)
    sampler.start()
    spin(0.1)
    usage = sampler.stop()
    assert usage.waits is not None and usage.waits.training_cpu_s >= 0.09, usage.waits
    assert usage.waits.window_s > 0
    # stopped without having started (the script failed before its measured steps): no window
    never = SystemSampler(interval_s=0.05).stop()
    assert never is not None and never.waits is None
