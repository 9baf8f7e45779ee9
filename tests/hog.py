"""A process that busy-loops on one core: a loaded machine for the tests (``--cpu-hog``); and
CPU work injected into a thread (``spin``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def spin(seconds: float) -> None:
    """Work on this thread's CPU for ``seconds`` of its CPU time (capture's cost is read on that
    clock: a sleep would never show in it, whether it was taken out or not)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


#: The hog: a busy loop that ends when the process that started it is gone (a session killed
#: before its teardown once left one spinning through a whole later `make test`).
HOG = """
import os, sys
owner, n = int(sys.argv[1]), 0
while True:
    n += 1
    if n % 2_000_000 == 0:
        try:
            os.kill(owner, 0)
        except OSError:
            break
"""


def start_hog() -> int:
    """Start the hog; its pid. It is no child of this process (a capture counts the script's
    children, e.g. DataLoader workers, as the script's own), and it ends with this process."""
    started = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c \"$HOG\" {os.getpid()} >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True, env={**os.environ, "HOG": HOG},
    )  # fmt: skip
    return int(started.stdout.split()[0])


def stop_hog(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


#: A child that works ``argv[1]`` seconds of its own CPU, says "spun", then waits to be killed:
#: its figures stay readable after the work (a process that ended takes them with it).
SPINNER = """
import sys, time
end = time.process_time() + float(sys.argv[1])
while time.process_time() < end:
    pass
print("spun", flush=True)
time.sleep(60)
"""


def spinning_child(cpu_s: float) -> subprocess.Popen:
    """Start a :data:`SPINNER` child of this process (one of "the script's own", as a DataLoader
    worker is): read ``"spun"`` from its stdout to know its work is done; kill it after."""
    return subprocess.Popen(
        [sys.executable, "-c", SPINNER, str(cpu_s)], stdout=subprocess.PIPE, text=True
    )
