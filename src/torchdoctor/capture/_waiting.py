"""Work and waiting: the CPU time of the script's threads, and their time ready to run but
waiting for a core, read from the kernel (Linux ``/proc/<pid>/task/<tid>/schedstat``).

On a machine other processes keep busy, a step's wall time grows while its work does not: the
training thread and torch's intra-op threads wait in the run queue for a core. Their CPU time
cannot tell it (torch's threads spin at their barriers, so a small MLP's forward and backward
went from 7.2 ms to 192 ms a step beside two busy loops, its training thread's CPU time from
7.2 ms to 96 ms), but the kernel counts the time each thread spent runnable and not running:
12.6 s of the 12.5 s of those steps, against 0.01 s quiet. That figure is the evidence that a
part's time was waiting for a core, and what two runs compared at two moments waited.

The figures are read at the start and the end of the measured steps (no cost inside a step):
the training thread's, and the script's threads together (this process's, less torchdoctor's
own sampler, and its children's: the DataLoader workers). A thread that ended inside the window
takes its figures with it, so they are at least what is said. Elsewhere than Linux nothing is
read and nothing is said.
"""

from __future__ import annotations

import os
import threading

from ..record import ThreadWaits

#: ``(CPU ns, run-queue wait ns)`` of each thread, by thread id, of each process by pid.
Times = dict[int, dict[int, tuple[int, int]]]


def thread_times(pid: int, tid: int) -> tuple[int, int] | None:
    """``(CPU ns, ns runnable but waiting for a core)`` of one thread; ``None`` when unread."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
            cpu, wait, _ = fh.read().split()
        return int(cpu), int(wait)
    except (OSError, ValueError):
        return None


def process_times(pid: int) -> dict[int, tuple[int, int]]:
    """Each live thread's figures (:func:`thread_times`) of process ``pid``."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    out = {}
    for tid in tids:
        times = thread_times(pid, int(tid))
        if times is not None:
            out[int(tid)] = times
    return out


class WaitWatch:
    """The script's threads' work and waiting between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        #: The thread that runs the training loop: the one that starts the watch (the measured
        #: steps start in the script's own step).
        self.training_tid = 0
        self._before: Times | None = None

    def _read(self, children: list[int]) -> Times:
        return {pid: process_times(pid) for pid in (self.pid, *children)}

    def start(self, children: list[int]) -> None:
        self.training_tid = threading.get_native_id()
        if os.path.exists(f"/proc/{self.pid}/task/{self.training_tid}/schedstat"):
            self._before = self._read(children)

    def stop(self, children: list[int], ours: set[int], window_s: float) -> ThreadWaits | None:
        """The figures since :meth:`start`, ``ours`` (torchdoctor's threads) left out."""
        if self._before is None or window_s <= 0:
            return None
        before, after = self._before, self._read(children)
        self._before = None
        training = _delta(before, after, self.pid, self.training_tid)
        if training is None or training[0] == 0:
            return None  # gone, or a kernel that keeps no scheduler figures (they read 0 0 0)
        cpu = wait = 0
        for pid, threads in after.items():
            for tid in threads:
                if pid == self.pid and tid in ours:
                    continue
                cpu_ns, wait_ns = _delta(before, after, pid, tid) or (0, 0)
                cpu, wait = cpu + cpu_ns, wait + wait_ns
        return ThreadWaits(
            window_s=round(window_s, 4),
            training_cpu_s=round(training[0] / 1e9, 4),
            training_waited_s=round(training[1] / 1e9, 4),
            threads_cpu_s=round(cpu / 1e9, 4),
            threads_waited_s=round(wait / 1e9, 4),
        )


def _delta(before: Times, after: Times, pid: int, tid: int) -> tuple[int, int] | None:
    """One thread's figures over the window: a thread born inside it counts from zero."""
    now = after.get(pid, {}).get(tid)
    if now is None:
        return None
    then = before.get(pid, {}).get(tid, (0, 0))
    return max(now[0] - then[0], 0), max(now[1] - then[1], 0)
