"""``torchdoctor run`` supervises: the script runs in a child process, its measurements stream here.

Why a second process: whatever ends the script's process (an error, ``sys.exit``, ``os._exit``,
SIGTERM, SIGKILL, the OOM killer, a segfault in native code), this one is still alive to write
the record of what was measured up to then and to say how the script ended. It also bounds every
run (``--max-seconds``), and each ``--fix`` re-run starts from a fresh process.

This module does not import torch: the supervisor only reads records.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_SCRIPT_ERROR,
    EXIT_TIMED_OUT,
    TorchdoctorError,
)
from ._paths import resolve_script
from ._stream import StreamReader, StreamState
from .analysis.verdict import summarise
from .options import RunOptions
from .record import RecordError, RunRecord

#: After the bound, or a SIGTERM to torchdoctor, the script gets this long to end before SIGKILL.
TERMINATE_GRACE_S = 5.0
#: How often the wait for the script looks at the clock.
POLL_S = 0.2


@dataclasses.dataclass
class Supervised:
    """A supervised run's record (it says how the script's process ended) and exit status."""

    record: RunRecord
    exit_status: int
    #: False on a node of a launched job that does not host rank 0: the report is rank 0's.
    reports: bool = True


def run_supervised(
    target: Any, options: RunOptions, progress: Callable[[str, int, int], None] | None = None
) -> Supervised:
    """Run ``target`` (a ``runner.Target``) in a child process under capture, within the bound.

    Raises:
        TorchdoctorError: the child could not run the script (not found, ...): its message.
    """
    if target.script:
        resolve_script(target.script)  # a missing script is told at once, not after torch loads
    from ._launch import check_launch, run_launched

    check_launch(options)
    if options.nproc_per_node:
        return run_launched(target, options, progress)
    spec = child_spec(target, options)
    with _Signals() as signals, tempfile.TemporaryDirectory(prefix="torchdoctor-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        if signals.received:  # interrupted before the script could start
            return _not_started(target, options, signals.received[0])
        read_fd, write_fd = os.pipe()
        try:
            # Its own session and process group: Ctrl-C at the terminal reaches only this
            # process, which hands it on once, and the bound can stop the script's own
            # processes (workers, helpers it forked) with it.
            proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD_CODE, str(spec_path), str(write_fd)],
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        reader = StreamReader(read_fd, progress)
        timed_out = _wait(proc, options.max_seconds, signals)
        _end_group(proc.pid)
        reader.join(timeout_s=10.0)
    signalled = signals.received[0] if signals.received else None
    return _outcome(reader.state, proc.returncode, target, options, timed_out, signalled)


def child_spec(target: Any, options: RunOptions) -> dict[str, Any]:
    """What the script's process is told: the target and the options it runs under."""
    return {
        "target": dataclasses.asdict(target),
        "options": {
            **{f.name: getattr(options, f.name) for f in dataclasses.fields(options)},
            "loader_overrides": dict(options.loader_overrides),
            "json_path": None,
            "fix": False,
            "quiet": True,
        },
    }


#: The child's entry. ``python -m`` would put the current folder first on ``sys.path``, and a
#: user's ``torchdoctor.py`` there would run in place of this package; ``-c`` puts ``''`` there,
#: which is dropped before the import (the script's own folder is added when it is run).
_CHILD_CODE = (
    "import sys; del sys.path[0]; from torchdoctor._child import main; sys.exit(main(sys.argv[1:]))"
)


class _Signals:
    """SIGINT and SIGTERM while supervising: remembered at once, acted on by the wait loop."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.handled = 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = _install(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            if previous is not None:
                _install(signum, previous)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received.append(signum)


def _wait(proc: subprocess.Popen, max_seconds: float | None, signals: _Signals) -> bool:
    """Wait for the child within the bound, handing signals on; returns whether it timed out.

    The first Ctrl-C is handed to the script (it ends with its record); a second one, or a
    SIGTERM, stops it.
    """
    deadline = None if not max_seconds else time.monotonic() + max_seconds
    timed_out = False
    while proc.poll() is None:
        while signals.handled < len(signals.received):
            signum = signals.received[signals.handled]
            signals.handled += 1
            if signum == signal.SIGINT and signals.handled == 1:
                _signal_group(proc.pid, signal.SIGINT)
            else:
                _terminate(proc)
        if deadline is not None and time.monotonic() >= deadline and not timed_out:
            timed_out = True
            _terminate(proc)
        try:
            proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
    return timed_out


def _terminate(proc: subprocess.Popen) -> None:
    """SIGTERM to the script's process group, then SIGKILL if it is still there after the grace."""
    if proc.poll() is not None:
        return
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def _end_group(pgid: int) -> None:
    """Stop what the script left running in its process group (forked helpers, workers)."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if not _signal_group(pgid, 0):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the process group; False when no process is left in it."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user: leave it
        return True
    return True


def _install(signum: int, handler: Any) -> Any:
    try:
        return signal.signal(signum, handler)
    except ValueError:  # not the main thread: leave signals alone
        return None


def _not_started(target: Any, options: RunOptions, signum: int) -> Supervised:
    record = RunRecord(command=target.describe(), warmup_steps=options.warmup)
    record.requested_steps = options.steps
    record.status = "interrupted"
    record.notes.append(f"torchdoctor received {_signal_name(signum)} before the script started")
    summarise(record)
    return Supervised(record, EXIT_INTERRUPTED)


def _outcome(
    state: StreamState,
    returncode: int | None,
    target: Any,
    options: RunOptions,
    timed_out: bool,
    signalled: int | None,
) -> Supervised:
    if state.final is not None:
        record = _record(state.final["record"])
        return Supervised(record, int(state.final["exit_status"]))
    error = state.error
    if error is not None and not error.get("internal"):
        raise TorchdoctorError(error["message"], error.get("hint"))
    record = record_from_stream(state, target.describe(), options)
    ending = _ending(returncode, timed_out, signalled, options)
    record.notes.append(ending)
    if error is not None:
        record.status = "internal-error"
        record.notes.append(f"torchdoctor itself failed: {error['message']}. Please report this.")
        return Supervised(record, EXIT_INTERNAL)
    if timed_out:
        record.status, status = "timed-out", EXIT_TIMED_OUT
    elif signalled is not None:
        record.status, status = "interrupted", EXIT_INTERRUPTED
    else:
        record.status, status = "killed", EXIT_SCRIPT_ERROR
    return Supervised(record, status)


def record_from_stream(state: StreamState, command: list[str], options: RunOptions) -> RunRecord:
    """The record of what was streamed: the last snapshot, and the steps that ended after it."""
    if state.snapshot is not None:
        record = _record(state.snapshot)
    else:
        record = RunRecord(command=command, warmup_steps=options.warmup)
        record.requested_steps = options.steps
    for phase, parts, batches in state.steps:
        if phase == "measure":
            record.steps.add_step(parts, batches)
        elif phase == "model-alone":
            record.model_alone.append(round(sum(parts.values()), 4))
        elif phase == "no-sync":
            record.no_sync.append(round(sum(parts.values()), 4))
    if state.seen is not None:
        record.seen = dict(state.seen)
    summarise(record)
    return record


def _ending(
    returncode: int | None, timed_out: bool, signalled: int | None, options: RunOptions
) -> str:
    """How the script's process ended, in the report's words."""
    if timed_out:
        return (
            f"stopped at the --max-seconds bound ({options.max_seconds:g} s) before the "
            "measurement finished; the figures cover what was measured until then (raise "
            "--max-seconds, or check that the loop reaches optimizer.step())"
        )
    if signalled is not None:
        return f"torchdoctor received {_signal_name(signalled)} and stopped the script"
    if returncode is not None and returncode < 0:
        oom = " (the OOM killer sends SIGKILL)" if -returncode == signal.SIGKILL else ""
        return (
            f"the script's process was killed by {_signal_name(-returncode)}{oom}; the figures "
            "cover what was measured until then"
        )
    return (
        f"the script's process ended with status {returncode} without torchdoctor's last word "
        "(os._exit, or a crash in native code); the figures cover what was measured until then"
    )


def _signal_name(signum: int) -> str:
    try:
        return f"{signal.Signals(signum).name} (signal {signum})"
    except ValueError:
        return f"signal {signum}"


def _record(data: dict[str, Any]) -> RunRecord:
    try:
        return RunRecord.from_dict(data)
    except RecordError as exc:  # our own stream: a mismatch is our bug
        raise RuntimeError(f"torchdoctor's stream held a bad record: {exc}") from exc
