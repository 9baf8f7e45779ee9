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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._errors import TorchdoctorError
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
    wait,
)
from .ending import Ending, Stop, decide_supervised, measured_anything, settle
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
    late = signals.handled < len(signals.received) and signals.unanswered_s is None
    outcome = _outcome(
        reader.state, proc.returncode, target, options, timed_out, signalled, late,
        signals.unanswered_s,
    )  # fmt: skip
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
    unanswered_s: float | None = None,
) -> Supervised:
    """The record and exit status of a supervised run, from what its process streamed and how
    it ended (the decision: :func:`.ending.decide_supervised`)."""
    error = state.error
    if state.final is None and error is not None and not error.internal:
        raise TorchdoctorError(error.message, error.hint)
    stop = Stop(
        timed_out=timed_out,
        signalled=signalled,
        late=late,
        returncode=returncode,
        max_seconds=options.max_seconds,
        whole=options.whole,
        failure=error.message if state.final is None and error is not None else "",
        unanswered_s=unanswered_s,
    )
    if state.final is not None:
        record = record_from_dict(state.final.record)
        # the child's own ending, with the exit status it sent
        child = Ending(record.status, state.final.exit_status, "measured")
        if record.ending is not None:
            child = replace(record.ending, exit_status=state.final.exit_status)
        ending = decide_supervised(
            child, stop, measured_anything(record), record.whole_run is not None
        )
        if ending is child:
            return Supervised(record, ending.exit_status)
        if ending.cause in ("bound", "signal"):
            _mark_cut(record)
        settle(record, ending, derive=ending.status != child.status)
        return Supervised(record, ending.exit_status)
    record = record_from_stream(state, target.describe(), options)
    ending = decide_supervised(None, stop, measured_anything(record))
    settle(record, ending)  # the status set, the verdict derived again: it reads the status
    if options.timeline_path:
        _write_logged_timeline(state, options.timeline_path, record)
    return Supervised(record, ending.exit_status)


def _mark_cut(record: RunRecord) -> None:
    """A whole run that torchdoctor's bound or a signal ended, though the script may have caught
    the stop and ended as if on its own (Lightning on SIGTERM or Ctrl-C, a loop inside ``try:
    ... except KeyboardInterrupt``): its accounts are marked cut."""
    from ..analysis.whole_course import mark_cut

    if record.whole_run is not None and record.whole_run.ending != "cut":
        mark_cut(record.whole_run)


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
