"""System utilisation sampled on a background thread while steps are measured."""

from __future__ import annotations

import os
import sys
import threading
import time

import psutil

from .._devices import nvml_handle, nvml_read
from ..loader import sample_children
from ..record import MIN_CPU_WINDOW_S, RankEnv, SystemUsage, ThreadWaits
from ._waiting import WaitWatch

#: 5 samples per second: enough to see worker RSS climb in a 20-step run, cheap on 2 cores.
DEFAULT_INTERVAL_S = 0.2
#: Seconds between two searches for this process's children (DataLoader workers): a search reads
#: every process's /proc entry (about 1 ms with 70 processes), a sample of known ones 0.05 ms.
CHILDREN_SEARCH_S = 2.0


def lower_thread_priority() -> None:
    """Give the calling thread the lowest CPU priority (nice 19) where the system allows it.

    torchdoctor's own threads (sampler, stream heartbeat) then take a core only when the
    script's threads leave it idle. Linux takes a thread id for a process id here; elsewhere
    this would lower the whole process, so it is left alone.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (OSError, AttributeError):
        pass


class SystemSampler:
    """Samples CPU % per core, RSS of this process and of its children, and NVML GPU figures."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, env: RankEnv | None = None) -> None:
        self.interval_s = interval_s
        #: Started by torchrun: the sibling ranks' CPU is the job's own (see _own_cpu_s).
        self._in_job = (env if env is not None else RankEnv.detect()).under_torchrun
        self._proc = psutil.Process(os.getpid())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: When sampling started (``time.monotonic()``); ``None`` until it does.
        self._t0: float | None = None
        self._timeline: list[float] = []
        self._cpu: list[list[float]] = []
        self._main_rss: list[float] = []
        self._workers_rss: list[float] = []
        self._workers_max = 0
        self._gpu_util: list[float] = []
        self._gpu_mem: list[float] = []
        self._nvml = nvml_handle()
        self._cpu_times = psutil.cpu_times(percpu=True)
        self._children: list[psutil.Process] = []
        self._children_found_at: float | None = None
        #: CPU seconds the whole machine was busy, and this process and its children, at start.
        self._busy0 = self._own0 = 0.0
        self._others_cores: float | None = None
        #: Seconds the others' figure was taken over (the measured steps' or, for steps too
        #: short, the run's since capture began).
        self._others_window_s: float | None = None
        #: Seconds from start to stop (``None`` while sampling, or when it never started).
        self._window_s: float | None = None
        #: The machine's and the script's CPU seconds when capture began: measured steps too
        #: short for the counters take the load from here instead (:meth:`stop`).
        self._early = self._counters()
        #: The script's threads' work and waiting over the window.
        self._waits = WaitWatch()
        self._thread_waits: ThreadWaits | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._cpu_times = psutil.cpu_times(percpu=True)
        self._t0 = time.monotonic()
        try:
            self._children = self._proc.children(recursive=True)
            self._children_found_at = self._t0
            self._busy0, self._own0 = busy_cpu_s(), self._own_cpu_s()
        except psutil.Error:
            self._busy0 = self._own0 = 0.0
        self._waits.start([c.pid for c in self._children])
        self._thread = threading.Thread(target=self._loop, name="torchdoctor-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> SystemUsage | None:
        """Stop sampling and summarise; ``None`` when nothing was sampled. Stopped without having
        started (the script failed before its measured steps), it reads memory once and tells no
        CPU shares: there was no window to take them over."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)
            self._thread = None
        try:
            self._sample()  # the tail since the last sample (a short run gets its only one)
            now = self._counters()
            if self._t0 is not None and now is not None:
                wall = self._window_s = now[0] - self._t0
                start = (self._t0, self._busy0, self._own0)
                if wall < MIN_CPU_WINDOW_S and self._early is not None:
                    start = self._early  # steps too short for the counters: the run so far
                self._others_cores, self._others_window_s = _others(start, now)
                self._thread_waits = self._waits.stop(
                    [c.pid for c in self._proc.children(recursive=True)], _our_threads(), wall
                )
        except psutil.Error:
            pass
        return self.summary()

    def _counters(self) -> tuple[float, float, float] | None:
        """``(time.monotonic(), the machine's busy CPU s, the script's CPU s)``."""
        try:
            return time.monotonic(), busy_cpu_s(), self._own_cpu_s()
        except psutil.Error:
            return None

    def others_cores_since_start(self) -> tuple[float | None, float | None]:
        """Cores' worth of CPU other processes took from the start of sampling to now (after
        ``stop`` too), and over how many seconds; ``(None, None)`` for too short a window."""
        if self._t0 is None:
            return None, None
        return _others((self._t0, self._busy0, self._own0), self._counters())

    def _own_cpu_s(self) -> float:
        """CPU seconds of the script: this process with its reaped children and its live ones
        (the workers); in a rank launched by torchrun, every local rank's (the others are the
        same job, not a busy machine)."""
        family = [self._proc, *self._children]
        if self._in_job:
            try:
                family = self._proc.parent().children(recursive=True)
            except (psutil.Error, AttributeError):
                pass
        own = 0.0
        for proc in family:
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            own += t.user + t.system + t.children_user + t.children_system
        return own

    def _loop(self) -> None:
        lower_thread_priority()
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except psutil.Error:
                continue

    def _sample(self) -> None:
        since = time.monotonic() - self._t0 if self._t0 is not None else 0.0
        self._timeline.append(round(since, 3))
        self._cpu.append(self._cpu_busy_since_last())
        self._main_rss.append(self._proc.memory_info().rss / 2**20)
        now = time.monotonic()
        if self._children_found_at is None or now - self._children_found_at >= CHILDREN_SEARCH_S:
            self._children = self._proc.children(recursive=True)
            self._children_found_at = now
        workers = sample_children(self._proc, children=self._children)
        self._workers_rss.append(sum(workers.rss_mb))
        self._workers_max = max(self._workers_max, workers.count)
        if self._nvml is not None:
            util, mem_mb = nvml_read(self._nvml)
            self._gpu_util.append(util)
            self._gpu_mem.append(mem_mb)

    def _cpu_busy_since_last(self) -> list[float]:
        """CPU % per core since the previous sample, from our own cpu_times deltas.

        (``psutil.cpu_percent`` keeps one baseline per process, which other callers reset.)
        """
        now = psutil.cpu_times(percpu=True)
        busy = []
        for before, after in zip(self._cpu_times, now):
            total = sum(after) - sum(before)
            idle = (after.idle + getattr(after, "iowait", 0.0)) - (
                before.idle + getattr(before, "iowait", 0.0)
            )
            busy.append(round(100.0 * (total - idle) / total, 1) if total > 0 else 0.0)
        self._cpu_times = now
        return busy

    def summary(self) -> SystemUsage | None:
        if not self._timeline:
            return None
        cores = len(self._cpu[0])
        per_core = [round(sum(s[i] for s in self._cpu) / len(self._cpu), 1) for i in range(cores)]
        if self._window_s is None or self._window_s < MIN_CPU_WINDOW_S:
            per_core = []  # no window, or too short for the counters: neither share is told
        return SystemUsage(
            interval_s=self.interval_s,
            samples=len(self._timeline),
            cpu_percent_per_core=per_core,
            cpu_percent_total=round(sum(per_core) / cores, 1) if per_core else None,
            main_rss_mb_max=round(max(self._main_rss), 1),
            workers=self._workers_max,
            workers_rss_mb_max=round(max(self._workers_rss), 1),
            timeline_s=self._timeline,
            main_rss_mb=[round(v, 1) for v in self._main_rss],
            workers_rss_mb=[round(v, 1) for v in self._workers_rss],
            gpu_util_pct=round(sum(self._gpu_util) / len(self._gpu_util), 1)
            if self._gpu_util
            else None,
            gpu_mem_mb_max=round(max(self._gpu_mem), 1) if self._gpu_mem else None,
            others_cpu_cores=self._others_cores,
            others_window_s=self._others_window_s,
            waits=self._thread_waits,
        )


def _others(
    start: tuple[float, float, float] | None, now: tuple[float, float, float] | None
) -> tuple[float | None, float | None]:
    """Cores' worth of CPU other processes took between two readings of :meth:`_counters`, and
    over how many seconds; ``(None, None)`` for a window too short for the counters."""
    if start is None or now is None or now[0] - start[0] < MIN_CPU_WINDOW_S:
        return None, None
    wall = now[0] - start[0]
    others = (now[1] - start[1]) - (now[2] - start[2])
    return round(max(others, 0.0) / wall, 2), round(wall, 3)


def _our_threads() -> set[int]:
    """torchdoctor's own live threads (their native ids): not the script's work or waiting."""
    return {
        t.native_id
        for t in threading.enumerate()
        if t.name.startswith("torchdoctor") and t.native_id is not None
    }


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has been busy since boot (every core, every process)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)
