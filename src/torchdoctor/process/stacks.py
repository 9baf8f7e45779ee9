"""Where the script was when torchdoctor stopped it: each process's Python stack at that moment.

The script's process registers :mod:`faulthandler` on a signal of its own (:data:`ASK`, a
real-time one on Linux; :func:`arm`), writing every
thread's stack to a file of its own (``stack.PID.txt``) in the parent's run folder. Before
it stops a run (the ``--max-seconds`` bound, a signal), the parent sends that signal to each
script process (:func:`dump`): faulthandler writes from its C signal handler, so a process
blocked in native code (a collective waiting for a peer, a ``time.sleep``) still answers. The
parent then reads the main thread's stack (:func:`read`): the user's innermost frame, and
whether the process was waiting in a collective (a ``torch.distributed`` call, or backward,
where DDP all-reduces).

This module does not import torch.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The signal that asks for the stacks: a real-time one where there are (SIGUSR1 and SIGUSR2 are
#: the scripts' own: Lightning and SLURM requeue on SIGUSR1), else SIGUSR1.
ASK = (
    getattr(signal, "SIGRTMIN", 0) + 7
    if hasattr(signal, "SIGRTMIN")
    else getattr(signal, "SIGUSR1", 0)
)
#: How long the parent waits for the stacks to be written.
DUMP_WAIT_S = 0.5

_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>.+)$')
_THREAD = re.compile(r"^(Current thread|Thread) (?P<id>0x[0-9a-f]+)")
#: The first line of a stack file: the main thread's id, as faulthandler writes ids.
_MAIN = "main thread"
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
#: A thread whose innermost frame is in one of these is waiting, not running (an idle pool
#: worker waits in C, called from the pool's own frame).
_IDLE = ("threading.py", "queue.py", "selectors.py", "socket.py", "concurrent/futures/thread.py")
#: Of the other threads running Python when stopped: how many are kept, and how deep.
OTHER_THREADS, OTHER_FRAMES = 4, 8


@dataclass
class StoppedAt:
    """Where a process was when it was stopped."""

    #: The user's innermost frame, ``file:line``, and its function and source line.
    where: str = ""
    function: str = ""
    source: str = ""
    #: Waiting in a collective: a ``torch.distributed`` call, or backward (DDP all-reduces there).
    in_collective: bool = False
    #: The main thread's frames, innermost first, as ``file:line in function``.
    frames: list[str] = field(default_factory=list)
    #: Every other thread that was running Python then (not waiting: :data:`_IDLE`): its
    #: innermost frames. A hook that torch runs on a thread of its
    #: own (autograd's device threads, a DataLoader's pin-memory thread) shows here.
    others: list[list[str]] = field(default_factory=list)

    def words(self) -> str:
        """``hang.py:12 in main (time.sleep(3600))``."""
        if not self.where:
            return ""
        text = f"{self.where} in {self.function}"
        return f"{text} ({self.source})" if self.source else text


def arm(folder: str | os.PathLike[str]) -> None:
    """In the script's process: write every thread's stack into ``folder`` on :data:`ASK`. The
    file stays open for the life of the process."""
    if not ASK:
        return
    import faulthandler

    try:
        out = open(Path(folder) / f"stack.{os.getpid()}.txt", "w", encoding="utf-8")  # noqa: SIM115
        # faulthandler names each thread by the same id: the main thread is found by it, not
        # by its frames (a dump keeps a thread's 100 innermost frames only)
        out.write(f"{_MAIN} 0x{threading.main_thread().ident or 0:016x}\n")
        out.flush()
        faulthandler.register(ASK, file=out, all_threads=True)
    except (OSError, RuntimeError, ValueError):
        return
    _kept.append(out)


_kept: list = []


def dump(pids: list[int]) -> None:
    """Ask each process for its stacks, and wait for them to be written."""
    asked = False
    for pid in pids:
        try:
            os.kill(pid, ASK)
            asked = True
        except (OSError, AttributeError):
            continue
    if asked:
        time.sleep(DUMP_WAIT_S)


def read(folder: str | os.PathLike[str], pid: int) -> StoppedAt | None:
    """The main thread's stack that process ``pid`` wrote, or ``None`` if it wrote none."""
    try:
        text = (Path(folder) / f"stack.{pid}.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return parse(text)


def parse(text: str) -> StoppedAt | None:
    """The main thread of a faulthandler dump (named by the id :func:`arm` wrote first; else
    the thread started at a module's top level; else the first not started by
    :mod:`threading`), and the other threads that were running Python."""
    main_id = None
    threads: list[tuple[str, list[tuple[str, int, str]]]] = []
    for line in text.splitlines():
        if line.startswith(_MAIN):
            main_id = line.split()[-1]
            continue
        header = _THREAD.match(line)
        if header:
            threads.append((header["id"], []))
            continue
        match = _FRAME.match(line)
        if match and threads:
            threads[-1][1].append((match["file"], int(match["line"]), match["func"].strip()))
    threads = [(ident, frames) for ident, frames in threads if frames]
    main = [frames for ident, frames in threads if ident == main_id]
    # A thread of torch's own running a hook starts at the hook, not at a module's top level.
    main = main or [frames for _, frames in threads if frames[-1][2] == "<module>"]
    main = main or [frames for _, frames in threads if not frames[-1][0].endswith("threading.py")]
    if not main:
        return None
    frames = main[0]
    running = [t for _, t in threads if t is not frames and not t[0][0].endswith(_IDLE)]
    # threads torch started itself first (no threading frame): where its hooks run
    running.sort(key=lambda t: any(f.endswith("threading.py") for f, _, _ in t))
    out = StoppedAt(
        frames=_words(frames[:16]),
        others=[_words(t[:OTHER_FRAMES]) for t in running[:OTHER_THREADS]],
    )
    out.in_collective = any(
        "/torch/distributed/" in f or "/torch/autograd/" in f or "/nn/parallel/" in f
        for f, _, _ in frames
    )
    for file, line, func in frames:
        if _is_users(file):
            out.where, out.function = f"{file}:{line}", func
            out.source = linecache.getline(file, line).strip().split("  # ")[0]
            break
    return out


def _words(frames: list[tuple[str, int, str]]) -> list[str]:
    return [f"{file}:{line} in {function}" for file, line, function in frames]


def _is_users(file: str) -> bool:
    """A frame of the user's own code: not Python's, an installed package's or torchdoctor's."""
    if file.startswith("<") or "site-packages" in file or "dist-packages" in file:
        return False
    path = os.path.abspath(file)
    if path.startswith(_PACKAGE_DIR + os.sep) and "scenarios" not in Path(path).parts:
        return False
    for prefix in {sys.base_prefix, sys.prefix}:
        if path.startswith(os.path.join(prefix, "lib") + os.sep):
            return False
    return True


#: A run whose every process's last measured step ended this long before the stop (and at least
#: :data:`STALL_STEPS` of its median steps before) had stalled: it was not stepping any more.
STALL_S = 5.0
STALL_STEPS = 20


def stalled_for(logged: list, stopped_at: float) -> float | None:
    """Seconds between the end of a process's last logged step and ``stopped_at`` (both on the
    machine's monotonic clock: ``time.perf_counter`` in the script, ``time.monotonic`` here,
    the same clock on Linux), when that gap says it had stalled; else ``None``."""
    if not logged:
        return None
    last = logged[-1]
    ended = last.start_ns / 1e9 + sum(last.parts.values()) / 1000.0
    steps = sorted(sum(s.parts.values()) / 1000.0 for s in logged)
    median = steps[len(steps) // 2]
    gap = stopped_at - ended
    return gap if gap >= max(STALL_S, STALL_STEPS * median) else None


def attach(record, stopped: StoppedAt | None, stalled_s: float | None = None) -> None:
    """Where the script was when stopped, into its record (and a note)."""
    if stopped is None or not stopped.where:
        return
    record.stopped_at = stopped.words()
    record.stopped_stack = list(stopped.frames)
    record.stopped_threads = [list(frames) for frames in stopped.others]
    record.stopped_in_collective = stopped.in_collective
    if stalled_s is not None:
        note = (
            f"the script had stopped stepping {stalled_s:.0f} s before it was stopped: it was "
            f"at {record.stopped_at}"
        )
        record.notes.append(note)
        tell_first(record, note)
    else:
        record.notes.append(f"when stopped, the script was at {record.stopped_at}")


def tell_first(record: Any, words: str) -> None:
    """A stall says how the run ended better than its status: its words lead the ending's
    (unless a rank that ended the job already leads it)."""
    if record.ending is not None and not record.ending.words:
        record.ending = dataclasses.replace(record.ending, words=words)
