"""One torchdoctor command run for a tool call: a process of its own, never a shell, bounded,
its progress lines passed on, and ended with everything it started when the call is cancelled.

The command runs as ``python -m torchdoctor ...`` in a new session (its own process group), so the
server survives whatever the script does, and a cancelled or overdue call can end the whole
group: first SIGTERM to torchdoctor, which stops the script and keeps the record as it does for
any SIGTERM, then, after :data:`GRACE_S`, SIGKILL to every process left in the group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
from anyio.abc import Process

from .._errors import TorchdoctorError

#: Seconds torchdoctor has to stop its script and write the record after SIGTERM.
GRACE_S = 20.0
#: Lines of standard error kept for an error's words.
TAIL_LINES = 40
#: Seconds the pipes are read after the command exits: a process the script detached (a logger's
#: helper, ``nohup``) may hold them open long after; its output is not waited for.
DRAIN_S = 2.0
#: Characters of standard output kept when it is not asked for (the report: the record says it).
STDOUT_TAIL = 20_000
#: Progress lines start so (``report.progress`` writes one per phase when not on a terminal).
PROGRESS_PREFIX = "torchdoctor: "
ERROR_PREFIX = "torchdoctor: error: "

Progress = Callable[[str], Awaitable[None]]


@dataclass
class Finished:
    """A command that ran to its end: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr_tail: list[str]

    def error_words(self) -> str:
        """The command's own error lines (``torchdoctor: error: ...`` and its ``fix:``), else
        how it ended and the end of what it printed on standard error."""
        lines = [line for line in self.stderr_tail if line.strip()]
        for i, line in enumerate(lines):
            if line.startswith(ERROR_PREFIX):
                return "\n".join(lines[i:]).strip()
        if self.returncode < 0:
            ended = f"the torchdoctor command was ended by signal {-self.returncode}"
        else:
            ended = f"the torchdoctor command exited with status {self.returncode}"
        said = "\n".join(lines[-12:])
        return f"{ended} without writing its record" + (
            f"; it printed last:\n{said}" if said else ""
        )


def command(*args: str) -> list[str]:
    """``python -m torchdoctor ARGS`` with this server's interpreter."""
    return [sys.executable, "-m", "torchdoctor", *args]


async def run_command(
    argv: Sequence[str],
    cwd: Path,
    bound_s: float,
    progress: Progress | None = None,
    stdout: bool = False,
) -> Finished:
    """Run ``argv`` in ``cwd`` to its end, within ``bound_s`` seconds; with ``stdout``, keep all
    it prints there (else only its last :data:`STDOUT_TAIL` characters).

    The call ends when the command exits; the pipes are read :data:`DRAIN_S` longer, not until a
    process the script detached closes them.

    Raises:
        TorchdoctorError: the command ran past ``bound_s`` (it and its processes are ended).
        Cancellation: passed on, after the command and every process it started are ended.
    """
    env = {**os.environ, "COLUMNS": "100", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    process = await anyio.open_process(
        list(argv),
        cwd=str(cwd),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    out: list[str] = []
    tail: list[str] = []

    kept = 0

    async def read_stdout() -> None:
        nonlocal kept
        assert process.stdout is not None
        async for chunk in process.stdout:
            out.append(chunk.decode("utf-8", "replace"))
            kept += len(out[-1])
            while not stdout and kept > STDOUT_TAIL and len(out) > 1:
                kept -= len(out.pop(0))

    async def read_stderr() -> None:
        assert process.stderr is not None
        pending = ""
        async for chunk in process.stderr:
            pending += chunk.decode("utf-8", "replace")
            *lines, pending = pending.split("\n")
            for line in lines:
                tail.append(line)
                del tail[:-TAIL_LINES]
                if progress and line.startswith(PROGRESS_PREFIX) and ERROR_PREFIX not in line:
                    await progress(line[len(PROGRESS_PREFIX) :])
        if pending:
            tail.append(pending)

    try:
        with anyio.fail_after(bound_s):
            async with anyio.create_task_group() as group:
                readers = _Readers(group, read_stdout, read_stderr)
                await process.wait()
                with anyio.move_on_after(DRAIN_S):
                    await readers.done.wait()
                group.cancel_scope.cancel()
    except TimeoutError:
        with anyio.CancelScope(shield=True):
            await end(process)
        raise TorchdoctorError(
            f"the call ran past its bound of {bound_s:.0f} s: the command and its processes "
            "were ended",
            "ask for fewer steps, or give max_seconds (the run's own bound keeps what it measured)",
        ) from None
    except BaseException:  # cancelled by the client, or the server is going down
        with anyio.CancelScope(shield=True):
            await end(process)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            _kill_group(process)  # anything the command left behind (a detached helper)
    assert process.returncode is not None
    return Finished(process.returncode, "".join(out), tail)


class _Readers:
    """Tasks started in ``group``; ``done`` is set when all have returned."""

    def __init__(self, group: anyio.abc.TaskGroup, *readers: Callable[[], Awaitable[None]]):
        self.done = anyio.Event()
        self._left = len(readers)
        for reader in readers:
            group.start_soon(self._run, reader)

    async def _run(self, reader: Callable[[], Awaitable[None]]) -> None:
        await reader()
        self._left -= 1
        if not self._left:
            self.done.set()


async def end(process: Process) -> None:
    """SIGTERM to torchdoctor (it stops the script and keeps the record), then after
    :data:`GRACE_S` SIGKILL to its whole process group; returns when it has exited."""
    if process.returncode is None:
        try:
            process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        with anyio.move_on_after(GRACE_S):
            await process.wait()
    _kill_group(process)
    await process.wait()


def _kill_group(process: Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
