"""Worker processes of the trace analyses: started fresh, ended with the process that started them.

A worker is a fresh interpreter (never a fork of a process that may hold threads) running a line
of code that imports the torch-free reader and analyses, with the current directory left off its
path: a ``tokenize.py`` or ``pickle.py`` beside the user's traces must not be imported in our
place. It watches the process that started it and ends when that one is gone (killed, hung up);
that process kills and reaps the workers still running on any ending of its own
(:func:`end_workers`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path


def worker_code(module: str, function: str) -> str:
    """The line a worker runs: ``module.function(sys.argv[1:])``, the current directory left
    off ``sys.path``."""
    # under PYTHONSAFEPATH (or -P) no current directory was put first: nothing to take off
    return (
        "import sys\nif not getattr(sys.flags, 'safe_path', False): del sys.path[0]\n"
        f"from {module} import {function}; {function}(sys.argv[1:])"
    )


def start_worker(code: str, args: list[str]) -> subprocess.Popen[bytes]:
    """A worker running ``code`` with ``args`` and this process's id last (:func:`end_with`).

    Raises:
        OSError: when no process can start (a process limit, no memory).
    """
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    # an empty entry (``PYTHONPATH=$PYTHONPATH:/x`` with none before) or "." is the current
    # directory: left out like the path's first entry (worker_code)
    given = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x not in ("", ".")]
    env["PYTHONPATH"] = os.pathsep.join([src, *given])
    return subprocess.Popen(
        [sys.executable, "-c", code, *args, str(os.getpid())],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def end_workers(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """Kill the workers still running and reap them, with SIGINT and SIGTERM held off meanwhile
    (a second Ctrl-C must not leave one running); they are delivered after."""
    held = threading.current_thread() is threading.main_thread() and hasattr(
        signal, "pthread_sigmask"
    )
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        procs = list(procs)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait()
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def end_with(parent: int) -> None:
    """End this process when ``parent`` is no longer its parent (killed, hung up)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="torchdoctor-parent-watch", daemon=True).start()
