"""The script's side of a supervised run, started as ``python -c CHILD_CODE SPEC FD`` (``-``: the
socket in ``TORCHDOCTOR_STREAM``, a rank of a launched job).

Runs the user's script under capture in this (fresh) process, exactly as ``run_target`` does
in-process, and streams what it measures on the pipe ``FD`` (see :mod:`.stream`) to the
``torchdoctor run`` process that started it. Whatever ends this process, the supervisor keeps
what arrived.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..record import RankEnv, phase_names
from .stacks import arm
from .stream import (
    LOGGED_PHASES,
    STREAM_ENV,
    Failed,
    Final,
    Hello,
    Progress,
    Seen,
    Snapshot,
    StepLog,
    StepLogAt,
    StreamWriter,
    Whole,
)

#: Seconds between two reports of what the capture saw (for a script that never steps).
SEEN_INTERVAL_S = 1.0
#: The step log holds at most this many steps (56 bytes each); later ones are only in snapshots.
MAX_LOGGED_STEPS = 100_000
#: Seconds between two progress messages within a phase (a phase's start and end always go).
PROGRESS_INTERVAL_S = 0.25
#: Seconds between two of ``run --whole``'s accounts sent (at a step's end): what a killed run
#: keeps.
WHOLE_INTERVAL_S = 5.0
#: Seconds a script may keep running after torchdoctor stopped it (it swallowed the stop with
#: ``except BaseException``) before this process sends the record and ends itself.
SWALLOWED_STOP_GRACE_S = 3.0
#: Seconds a whole run's SIGTERM handler waits for its last accounts to go out before it ends.
SIGTERM_SEND_S = 2.0


def main(argv: list[str]) -> int:
    spec_path = argv[0]
    # Ctrl-C ignored by the shell that started torchdoctor (``&``, nohup) is inherited as
    # ignored; the supervisor hands Ctrl-C on, so it must work here.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    writer = StreamWriter(int(argv[1]) if argv[1] != "-" else _connect(os.environ[STREAM_ENV]))
    if argv[1] == "-":
        ranks = RankEnv.detect()
        writer.send(
            Hello(
                rank=ranks.rank,
                local_rank=ranks.local_rank,
                world_size=ranks.world_size,
                pid=os.getpid(),
            )
        )
    arm(Path(spec_path).parent)  # where it was when stopped: its stack, on the parent's ask
    try:
        return _run(spec, writer, str(Path(spec_path).parent / f"steps.{os.getpid()}"))
    except KeyboardInterrupt:  # before the script started (importing torch): nothing measured
        return 130
    finally:
        writer.close()


def _run(spec: dict[str, Any], writer: StreamWriter, log_path: str) -> int:
    # Imported here: torch is loaded only once the pipe is open, so an import failure is streamed.
    from .._errors import EXIT_INTERNAL, TorchdoctorError
    from ..capture import lower_thread_priority, parts_from_marks
    from ..options import RunOptions
    from .build import build_record
    from .inprocess import run_target, user_traceback, write_run_timeline
    from .target import Target

    target = Target(**spec["target"])
    options = RunOptions(**spec["options"])
    command = target.describe()
    live: dict[str, Any] = {}
    stop = threading.Event()
    # Room for every step of the logged phases (each takes at most --steps), with slack, up to
    # MAX_LOGGED_STEPS (a few MB).
    capacity = min(len(LOGGED_PHASES) * options.steps + 64, MAX_LOGGED_STEPS)
    log = StepLog(log_path, capacity=capacity)
    writer.send(StepLogAt(log.path))
    shown: list[Any] = [None, 0.0]  # the phase last shown, and when

    def progress(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        running = 0 < done < total or (phase == phase_names.WHOLE and done > 0)
        if phase == shown[0] and running and now - shown[1] < PROGRESS_INTERVAL_S:
            return  # a step's progress waits: no message, no wake-up, in the step
        shown[0], shown[1] = phase, now
        session = live.get("session")
        whole = session.whole if session is not None else None
        detail = whole.status_words() if whole is not None else None
        writer.send(Progress(phase, done, total, detail))

    def listen(event: str, session: Any, phase: Any, step: Any) -> None:
        live["session"] = session
        # A snapshot at each phase's start, and in the trials phase each time a lever's run
        # ends (its steps are not streamed one by one): what was measured survives a kill.
        trials = len(session.data.trials)
        if event == "phase" or trials != live.get("trials", trials):
            record = build_record(session, command, "running", snapshot=True)
            writer.send(Snapshot(record.to_dict(), log.count))
        live["trials"] = trials
        if event == "step" and session.whole is not None:
            if not live.get("window") and len(session.data.measured) >= options.steps:
                live["window"] = True  # the measured steps and the loader, for a killed run
                record = build_record(session, command, "running", snapshot=True)
                writer.send(Snapshot(record.to_dict(), log.count))
            now = time.monotonic()
            if now - live.get("whole_at", 0.0) >= WHOLE_INTERVAL_S:  # between two steps
                live["whole_at"] = now
                writer.send(Whole(session.whole.summary(final=False)))
        if event == "step" and phase.name in LOGGED_PHASES:
            log.append(
                phase.name, step.batches, parts_from_marks(step.marks), step.marks[0].host_ns
            )

    parent = os.getppid()

    def report_seen() -> None:
        lower_thread_priority()
        done_at = None
        while not stop.wait(SEEN_INTERVAL_S):
            if os.getppid() != parent:
                # The supervisor was killed: nobody will read the record or bound the run.
                os._exit(EXIT_INTERNAL)
            session = live.get("session")
            if session is None:
                continue
            writer.send(Seen(dict(session.data.seen)))
            if session.phase_name != phase_names.DONE or not session.installed:
                continue  # still measuring, or the script has ended (a job gathers its ranks)
            if not session.hooks.stop_when_done:
                continue  # not told to stop: a job held until Join lets its ranks go
            done_at = done_at or time.monotonic()
            if time.monotonic() - done_at >= SWALLOWED_STOP_GRACE_S:
                _end_swallowed(session)

    def _end_swallowed(session: Any) -> None:
        """The script caught the stop and carries on: send the record, then end this process."""
        record = build_record(session, command, "stopped")
        record.notes.append(
            "the script caught torchdoctor's stop (an `except BaseException` or bare `except:` "
            "around the step) and kept running; torchdoctor ended its process "
            f"{SWALLOWED_STOP_GRACE_S:g} s later"
        )
        if options.timeline_path:
            write_run_timeline(session, options.timeline_path, record)
        writer.send(Final(record.to_dict(), exit_status=0))
        writer.close()
        os._exit(0)

    heartbeat = threading.Thread(target=report_seen, name="torchdoctor-seen", daemon=True)
    heartbeat.start()
    if options.whole:
        _accounts_on_sigterm(live, writer)
    try:
        outcome = run_target(target, options, progress=progress, listener=listen)
    except TorchdoctorError as exc:
        writer.send(Failed(exc.message, exc.hint, exc.exit_status))
        return exc.exit_status
    except BaseException as exc:  # noqa: BLE001 - torchdoctor's own failure, told to the parent
        writer.send(Failed(f"{type(exc).__name__}: {exc}", internal=True))
        raise SystemExit(EXIT_INTERNAL) from exc
    finally:
        stop.set()
    lines: list[str] = []
    if outcome.error is not None:
        lines = user_traceback(outcome.error)
        sys.stderr.write("".join(lines) + "\n")
    writer.send(Final(outcome.record.to_dict(), outcome.exit_status, lines))
    return outcome.exit_status


def _accounts_on_sigterm(live: dict[str, Any], writer: StreamWriter) -> None:
    """``run --whole``: on SIGTERM (a scheduler's preemption, torchdoctor's stop, torchrun's
    shutdown of a job) send the whole run's accounts as they are, then end by SIGTERM as the
    script would have: without it the accounts since the last sent (up to
    :data:`WHOLE_INTERVAL_S`) were lost as tail. A script that handles SIGTERM itself replaces
    this handler and ends its own way (its accounts then end with it)."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        try:
            session = live.get("session")
            whole = getattr(session, "whole", None)
            if whole is not None:
                accounts = Whole(whole.summary(final=False))
                # sent from another thread: this one may hold the writer's lock (a send cut)
                sender = threading.Thread(target=writer.send, args=(accounts,), daemon=True)
                sender.start()
                sender.join(SIGTERM_SEND_S)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


def _connect(path: str) -> int:
    """A stream socket to the supervisor of a launched job; its fd belongs to the writer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    return sock.detach()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
