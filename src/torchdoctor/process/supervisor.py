"""``torchdoctor run`` supervises: the script runs in a child process, its measurements stream here.

Why a second process: whatever ends the script's process (an error, ``sys.exit``, ``os._exit``,
SIGTERM, SIGKILL, the OOM killer, a segfault in native code), this one is still alive to write
the record of what was measured up to then and to say how the script ended. It also bounds every
run (``--max-seconds``), and each ``--fix`` re-run starts from a fresh process.

This module does not import torch: the supervisor only reads records.
"""

from __future__ import annotations

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

from .._errors import EXIT_INTERRUPTED, TorchdoctorError
from .._paths import resolve_script
from ..options import RunOptions
from ..record import RunRecord
from . import stacks
from ._processes import (
    CHILD_CODE,
    Signals,
    Supervised,
    child_spec,
    end_group,
    not_started,
    record_from_dict,
    record_from_stream,
    signal_name,
    wait,
)
from .endings import ENDED_EARLY, OWN_ENDING_NOTES, exit_for
from .stream import StreamReader, StreamState


def run_supervised(
    target: Any, options: RunOptions, progress: Callable[[str, int, int], None] | None = None
) -> Supervised:
    """Run ``target`` (a ``runner.Target``) in a child process under capture, within the bound.

    Raises:
        TorchdoctorError: the child could not run the script (not found, ...): its message.
    """
    if target.script:
        resolve_script(target.script)  # a missing script is told at once, not after torch loads
    from .launch import check_launch, run_launched

    check_launch(options)
    if options.nproc_per_node:
        return run_launched(target, options, progress)
    spec = child_spec(target, options)
    with Signals() as signals, tempfile.TemporaryDirectory(prefix="torchdoctor-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        if signals.received:  # interrupted before the script could start
            return not_started(target, options, signals.received[0])
        read_fd, write_fd = os.pipe()
        try:
            # Its own session and process group: Ctrl-C at the terminal reaches only this
            # process, which hands it on once, and the bound can stop the script's own
            # processes (workers, helpers it forked) with it.
            proc = subprocess.Popen(
                [sys.executable, "-c", CHILD_CODE, str(spec_path), str(write_fd)],
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        reader = StreamReader(read_fd, progress)
        asked: list[float] = []  # when the script was asked where it was (the stop's moment)

        def ask_where() -> None:
            if reader.state.step_log is None:
                return  # not armed yet (the signal's default would end the process)
            asked.append(time.monotonic())
            stacks.dump([proc.pid])

        timed_out = wait(
            proc, options.max_seconds, signals, interrupt_first=options.whole, before_stop=ask_where
        )
        end_group(proc.pid)
        reader.join(timeout_s=10.0)
        stopped = stacks.read(tmp, proc.pid) if asked else None
    signalled = signals.received[0] if signals.received else None
    # a signal that came as the script ended was never handed on: the run was still asked to stop
    late = signals.handled < len(signals.received)
    outcome = _outcome(reader.state, proc.returncode, target, options, timed_out, signalled, late)
    if asked and not late:
        stalled = stacks.stalled_for(reader.state.logged, asked[0])
        stacks.attach(outcome.record, stopped, stalled)
    return outcome


def _outcome(
    state: StreamState,
    returncode: int | None,
    target: Any,
    options: RunOptions,
    timed_out: bool,
    signalled: int | None,
    late: bool = False,
) -> Supervised:
    if state.final is not None:
        record = record_from_dict(state.final.record)
        if late and signalled is not None:
            # the record is whole; the exit status says that the user asked to stop (a
            # command that runs the script again, like `fix`, stops there)
            record.notes.append(
                f"{signal_name(signalled)} arrived as the script ended: the record is complete"
            )
            return Supervised(record, EXIT_INTERRUPTED)
        stop_handed_on = timed_out or signalled is not None
        if stop_handed_on and (record.whole_run is not None or record.status in ENDED_EARLY):
            return _cut(record, timed_out, signalled, options)
        return Supervised(record, state.final.exit_status)
    error = state.error
    if error is not None and not error.internal:
        raise TorchdoctorError(error.message, error.hint)
    record = record_from_stream(state, target.describe(), options)
    ending = _ending(returncode, timed_out, signalled, options)
    record.notes.append(ending)
    if options.timeline_path:
        _write_logged_timeline(state, options.timeline_path, record)
    if error is not None:
        record.status = "internal-error"
        record.notes.append(f"torchdoctor itself failed: {error.message}. Please report this.")
    elif timed_out:
        record.status = "timed-out"
    elif signalled is not None:
        record.status = "interrupted"
    else:
        record.status = "killed"
    return Supervised(record, exit_for(record))


def _cut(
    record: RunRecord, timed_out: bool, signalled: int | None, options: RunOptions
) -> Supervised:
    """A run that torchdoctor's bound or a signal ended, though the script may have caught the
    stop and ended as if on its own (Lightning on SIGTERM or Ctrl-C, a loop inside ``try: ...
    except KeyboardInterrupt``): the stop's status, and a whole run's accounts marked cut."""
    from ..analysis.whole_course import mark_cut

    if record.whole_run is not None and record.whole_run.ending != "cut":
        mark_cut(record.whole_run)
    note = _ending(None, timed_out, signalled, options)
    # the script's own words for how it ended were about the stop torchdoctor handed it
    record.notes = [n for n in record.notes if not n.startswith(OWN_ENDING_NOTES)]
    if note not in record.notes:
        record.notes.append(note)
    record.status = "timed-out" if timed_out else "interrupted"
    return Supervised(record, exit_for(record))


def _write_logged_timeline(state: StreamState, path: str, record: RunRecord) -> None:
    """The ``--timeline`` of a script whose process ended without its last word: written here,
    from the step log, as the record is; a note says what it holds."""
    from ..report.timeline import phases_of_parts, write_timeline

    steps = [(s.phase, s.parts, s.start_ns) for s in state.logged]
    try:
        write_timeline(path, phases_of_parts(steps))
    except OSError as exc:
        record.notes.append(f"the timeline could not be written to {path}: {exc}")
        return
    record.notes.append(
        f"the timeline at {path} holds the {len(steps)} step(s) measured before the script's "
        "process ended, each step's parts in a fixed order (the order of the calls within a step "
        "was not kept)"
        if steps
        else f"the timeline at {path} holds no step: none was measured before the script's "
        "process ended"
    )


def _ending(
    returncode: int | None, timed_out: bool, signalled: int | None, options: RunOptions
) -> str:
    """How the script's process ended, in the report's words."""
    if timed_out and options.whole:
        return (
            f"stopped at the --max-seconds bound ({options.max_seconds:g} s): the whole run's "
            "accounts cover it until then, and its goodput is projected"
        )
    if timed_out:
        return (
            f"stopped at the --max-seconds bound ({options.max_seconds:g} s) before the "
            "measurement finished; the figures cover what was measured until then (raise "
            "--max-seconds, or check that the loop reaches optimizer.step())"
        )
    if signalled is not None:
        return f"torchdoctor received {signal_name(signalled)} and stopped the script"
    if returncode is not None and returncode < 0:
        oom = " (the OOM killer sends SIGKILL)" if -returncode == signal.SIGKILL else ""
        return (
            f"the script's process was killed by {signal_name(-returncode)}{oom}; the figures "
            "cover what was measured until then"
        )
    return (
        f"the script's process ended with status {returncode} without torchdoctor's last word "
        "(os._exit, or a crash in native code); the figures cover what was measured until then"
    )
