"""What the supervisor of one process and the launcher of a job share: the child's command and
spec, signals while supervising, waiting within the bound, ending a process group, and the record
put together from a stream. Torch-free.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from ..analysis.verdict import summarise
from ..options import RunOptions
from ..record import SEEN_IN_JOIN, RecordError, RunRecord, phase_names
from .ending import decide_not_started, settle
from .stream import StreamState

#: After the bound, or a SIGTERM to torchdoctor, the script gets this long to end before SIGKILL.
TERMINATE_GRACE_S = 5.0
#: After the first Ctrl-C handed on, the script gets this long to end (its record sent) before
#: it is stopped as by a second one: a script that ignores or swallows Ctrl-C, or hangs ending,
#: must not hold the run until ``--max-seconds``. Long enough for a checkpoint saved on
#: ``KeyboardInterrupt`` and for torchrun, which gives its workers 30 s after a SIGINT.
INTERRUPT_GRACE_S = 60.0
#: How often the wait for the script looks at the clock.
POLL_S = 0.2


@dataclasses.dataclass
class Supervised:
    """A supervised run's record (it says how the script's process ended) and exit status."""

    record: RunRecord
    exit_status: int
    #: False on a node of a launched job that does not host rank 0: the report is rank 0's.
    reports: bool = True


def child_spec(target: Any, options: RunOptions) -> dict[str, Any]:
    """What the script's process is told: the target and the options it runs under."""
    return {
        "target": dataclasses.asdict(target),
        "options": {
            **options.plain(),
            "json_path": None,
            "fix": False,
            "quiet": True,
        },
    }


#: The child's entry. ``python -m`` would put the current folder first on ``sys.path``, and a
#: user's ``torchdoctor.py`` there would run in place of this package; ``-c`` puts ``''`` there,
#: which is dropped before the import (the script's own folder is added when it is run).
CHILD_CODE = "import sys; del sys.path[0]; from torchdoctor.process.child import main; sys.exit(main(sys.argv[1:]))"


class Signals:
    """SIGINT and SIGTERM while supervising: remembered at once, acted on by the wait loop."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.handled = 0
        #: Where the first Ctrl-C was handed on and the script had not ended this many seconds
        #: later (:data:`INTERRUPT_GRACE_S`), so it was stopped; else ``None``.
        self.unanswered_s: float | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = install_handler(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            if previous is not None:
                install_handler(signum, previous)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received.append(signum)


def wait(
    proc: subprocess.Popen,
    max_seconds: float | None,
    signals: Signals,
    interrupt_first: bool = False,
    before_stop: Callable[[], None] | None = None,
) -> bool:
    """Wait for the child within the bound, handing signals on; returns whether it timed out.

    The first Ctrl-C is handed to the script (it ends with its record); a second one, a
    SIGTERM, or the script not ended :data:`INTERRUPT_GRACE_S` after the first stops it
    (``signals.unanswered_s`` then says so). With ``interrupt_first`` (``run --whole``) the
    bound is a Ctrl-C too, and a stop only after the grace: the script's process sends its
    accounts as they are then.
    ``before_stop`` runs once, before the first stop handed on (where the script was then:
    :mod:`.stacks`).
    """
    deadline = None if not max_seconds else time.monotonic() + max_seconds
    timed_out = False
    grace: float | None = None
    answer_by: float | None = None  # the first Ctrl-C's grace
    pending = [before_stop] if before_stop is not None else []
    while proc.poll() is None:
        stopping = signals.handled < len(signals.received) or (
            deadline is not None and time.monotonic() >= deadline and not timed_out
        )
        if stopping and pending:
            pending.pop()()
        while signals.handled < len(signals.received):
            signum = signals.received[signals.handled]
            signals.handled += 1
            if signum == signal.SIGINT and signals.handled == 1:
                signal_group(proc.pid, signal.SIGINT)
                answer_by = time.monotonic() + INTERRUPT_GRACE_S
            else:
                terminate(proc)
        if deadline is not None and time.monotonic() >= deadline and not timed_out:
            timed_out = True
            if interrupt_first:
                signal_group(proc.pid, signal.SIGINT)
                grace = time.monotonic() + TERMINATE_GRACE_S
            else:
                terminate(proc)
        if grace is not None and time.monotonic() >= grace:
            grace = None
            terminate(proc)
        if answer_by is not None and time.monotonic() >= answer_by and proc.poll() is None:
            answer_by = None
            signals.unanswered_s = INTERRUPT_GRACE_S
            terminate(proc)
        try:
            proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
    return timed_out


def terminate(proc: subprocess.Popen) -> None:
    """SIGTERM to the script's process group, then SIGKILL if it is still there after the grace."""
    if proc.poll() is not None:
        return
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def end_group(pgid: int) -> None:
    """Stop what the script left running in its process group (forked helpers, workers)."""
    if not signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if not signal_group(pgid, 0):
            return
        time.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)


def signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the process group; False when no process is left in it."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user: leave it
        return True
    return True


def install_handler(signum: int, handler: Any) -> Any:
    try:
        return signal.signal(signum, handler)
    except ValueError:  # not the main thread: leave signals alone
        return None


def not_started(target: Any, options: RunOptions, signum: int) -> Supervised:
    record = RunRecord(command=target.describe(), warmup_steps=options.warmup)
    record.requested_steps = options.steps
    ending = decide_not_started(signum)
    settle(record, ending)
    return Supervised(record, ending.exit_status)


def record_from_stream(state: StreamState, command: list[str], options: RunOptions) -> RunRecord:
    """The record of what was streamed: the last snapshot, and the steps that ended after it."""
    if state.snapshot is not None:
        record = record_from_dict(state.snapshot)
    else:
        record = RunRecord(command=command, warmup_steps=options.warmup)
        record.requested_steps = options.steps
    for phase, parts, batches, _ in state.steps:
        if phase == phase_names.MEASURE:
            record.steps.add_step(parts, batches)
        elif phase == phase_names.MODEL_ALONE:
            record.model_alone.append(round(sum(parts.values()), 4))
        elif phase == phase_names.NO_SYNC:
            record.no_sync.append(round(sum(parts.values()), 4))
    if state.seen is not None:  # the latest counts, beside what the snapshot says (the backend)
        record.seen.update(state.seen)
        if record.joined_at is None and SEEN_IN_JOIN in state.seen:  # stopped in Join's loop
            record.joined_at = state.seen[SEEN_IN_JOIN]
    if state.whole is not None:  # run --whole: the accounts last sent; the time since is tail
        from ..analysis.whole_run import attach_whole

        ended = state.closed_at if state.closed_at is not None else time.monotonic()
        attach_whole(record, state.whole, cut=True, wall_s=ended - state.started_at)
    summarise(record)
    return record


def record_from_dict(data: dict[str, Any]) -> RunRecord:
    try:
        return RunRecord.from_dict(data)
    except RecordError as exc:  # our own stream: a mismatch is our bug
        raise RuntimeError(f"torchdoctor's stream held a bad record: {exc}") from exc
