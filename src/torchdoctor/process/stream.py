"""The measurements a script's process streams to the ``torchdoctor run`` process that supervises it.

One JSON object per line on a pipe the supervisor opened, each one of the message dataclasses
below (its ``KIND`` in the object's ``"t"``). What is sent, and why it is enough to rebuild a
record when the script's process dies at any moment:

- :class:`Hello` first, from a rank of a launched job: which rank it is and its process id;
- :class:`StepLogAt`: the path of the process's step log (:class:`StepLog`): each measured,
  model-alone and no-sync step's parts are written there as it ends, not sent, so a step costs
  no message and wakes nobody, and steps taken since the last snapshot are not lost;
- :class:`Snapshot`: the whole record so far, at each phase's start (cheap there: between two
  steps of the script, outside any timed step), with how many steps the log held then;
- :class:`Progress`: the phase and its progress, for the display, at most a few times a second;
- :class:`Seen`: what the capture saw so far, once a second from a thread, so even a script that
  never steps leaves a trace of what it did;
- :class:`Whole`: ``run --whole``'s accounts so far, every few seconds at a step's end;
- :class:`Final`: the finished record and the exit status, the last word of a script that ended
  in a way torchdoctor saw (stopped on purpose, an error, ``sys.exit``, Ctrl-C);
- :class:`Failed`: the script could not be run at all (not found), or torchdoctor itself failed.

The writer never raises: a supervisor that went away must not break the user's script.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NamedTuple

from ..record import STEP_PARTS, WholeSummary, phase_names

#: A rank of a launched job finds the supervisor's socket here (torchrun closes other fds).
STREAM_ENV = "TORCHDOCTOR_STREAM"
#: Phases whose steps go into the step log (the others only count in snapshots).
LOGGED_PHASES = phase_names.TIMED_PHASES
_HEADER = struct.Struct("<Q")  # steps written so far
_STEP = struct.Struct("<IIQ" + "d" * len(STEP_PARTS))  # phase, batches, start (ns), parts (ms)


# --- the messages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """A rank of a launched job, first on its socket: who it is."""

    KIND: ClassVar[str] = "hello"
    rank: int
    local_rank: int
    world_size: int
    pid: int


@dataclass(frozen=True)
class StepLogAt:
    """Where the process writes its step log."""

    KIND: ClassVar[str] = "steplog"
    path: str


@dataclass(frozen=True)
class Snapshot:
    """The record so far (its dict form), and how many steps the step log held then."""

    KIND: ClassVar[str] = "snapshot"
    record: dict[str, Any]
    logged: int = 0


@dataclass(frozen=True)
class Progress:
    """The phase and how far it is; ``detail``: ``run --whole``'s live figures."""

    KIND: ClassVar[str] = "progress"
    phase: str
    done: int
    total: int
    detail: str | None = None


@dataclass(frozen=True)
class Seen:
    """What the capture saw so far (calls, batches, steps), by name."""

    KIND: ClassVar[str] = "seen"
    seen: dict[str, int]


@dataclass(frozen=True)
class Whole:
    """``run --whole``'s accounts so far."""

    KIND: ClassVar[str] = "whole"
    summary: WholeSummary

    @classmethod
    def from_wire(cls, summary: dict[str, Any]) -> Whole:
        return cls(WholeSummary.from_wire(summary))


@dataclass(frozen=True)
class Final:
    """The finished record, the exit status, and the script's own traceback if it raised."""

    KIND: ClassVar[str] = "final"
    record: dict[str, Any]
    exit_status: int
    traceback: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Failed:
    """The script could not be run (``message``, ``hint``: the user's to fix), or torchdoctor
    itself failed (``internal``)."""

    KIND: ClassVar[str] = "error"
    message: str
    hint: str | None = None
    exit_status: int | None = None
    internal: bool = False


Message = Hello | StepLogAt | Snapshot | Progress | Seen | Whole | Final | Failed
#: Each message class by the kind on the wire.
MESSAGES: dict[str, type[Message]] = {
    cls.KIND: cls for cls in (Hello, StepLogAt, Snapshot, Progress, Seen, Whole, Final, Failed)
}


def encode(message: Message) -> bytes:
    """One line on the wire."""
    body = {f.name: getattr(message, f.name) for f in fields(message)}
    return (json.dumps({"t": message.KIND, **body}, default=_plain) + "\n").encode()


def decode(line: bytes | str) -> Message | None:
    """The message a line holds, or None when it is not one of ours (unknown kind, missing or
    extra fields)."""
    try:
        body = json.loads(line)
        cls = MESSAGES.get(body.pop("t", None)) if isinstance(body, dict) else None
        if cls is None:
            return None
        # a message with a typed field rebuilds it (Whole's summary); the others are plain
        return getattr(cls, "from_wire", cls)(**body)
    except (ValueError, TypeError):
        return None


class LoggedStep(NamedTuple):
    """One step read back from a step log."""

    phase: str
    parts: dict[str, float]
    batches: int
    #: When it started, on the script's ``time.perf_counter_ns`` clock.
    start_ns: int


class StepLog:
    """The steps of the logged phases, written into a file the supervisor reads afterwards.

    The file is mapped into memory: a step is one ``pack_into`` (no system call, no message, no
    wake-up of another process, nothing kept), and its pages belong to the kernel, so what was
    written survives the process being killed. The count in the header is written after the
    step, so a reader never sees half of one. Steps beyond ``capacity`` are not logged (the
    snapshots and the final record still have them).
    """

    def __init__(self, path: str, capacity: int) -> None:
        self.path = path
        self.count = 0
        self._capacity = capacity
        size = _HEADER.size + capacity * _STEP.size
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def append(self, phase: str, batches: int, parts: dict[str, float], start_ns: int = 0) -> None:
        """Log one step: its parts in :data:`~torchdoctor.record.STEP_PARTS` order, and when it
        started on the script's ``perf_counter_ns`` clock (for the timeline)."""
        if self.count >= self._capacity:
            return
        offset = _HEADER.size + self.count * _STEP.size
        _STEP.pack_into(
            self._map, offset, LOGGED_PHASES.index(phase), batches, start_ns, *parts.values()
        )
        self.count += 1
        _HEADER.pack_into(self._map, 0, self.count)


def read_step_log(path: str, start: int = 0) -> list[LoggedStep]:
    """The logged steps from the ``start``-th on; none when the file is missing or unreadable
    (the process died before making it)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        (count,) = _HEADER.unpack_from(data, 0)
        count = min(count, (len(data) - _HEADER.size) // _STEP.size)
    except (OSError, struct.error):
        return []
    out = []
    for i in range(start, count):
        phase, batches, start_ns, *values = _STEP.unpack_from(data, _HEADER.size + i * _STEP.size)
        if phase < len(LOGGED_PHASES):
            out.append(
                LoggedStep(LOGGED_PHASES[phase], dict(zip(STEP_PARTS, values)), batches, start_ns)
            )
    return out


class StreamWriter:
    """Sends messages on a file descriptor; thread-safe; silent once the reader is gone."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._broken = False

    def send(self, message: Message) -> None:
        if self._broken:
            return
        line = encode(message)
        with self._lock:
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError:
                self._broken = True

    def close(self) -> None:
        with self._lock:
            self._broken = True
            try:
                os.close(self._fd)
            except OSError:
                pass


@dataclass
class StreamState:
    """What the supervisor has received so far."""

    snapshot: dict[str, Any] | None = None
    #: Every step of the step log, read once the writer's end closed.
    logged: list[LoggedStep] = field(default_factory=list)
    #: The writer's step log, and how many steps it held at the last snapshot.
    step_log: str | None = None
    logged_at_snapshot: int = 0

    @property
    def steps(self) -> list[LoggedStep]:
        """The logged steps that ended after the last snapshot (which holds the others)."""
        return self.logged[self.logged_at_snapshot :]

    seen: dict[str, int] | None = None
    #: ``run --whole``'s accounts as last sent (every few seconds).
    whole: WholeSummary | None = None
    final: Final | None = None
    #: The child could not run the script, or torchdoctor failed in it.
    error: Failed | None = None
    #: A rank of a launched job: who it is.
    hello: Hello | None = None
    #: ``time.monotonic()`` when ``final`` arrived: which rank failed first.
    final_at: float | None = None
    #: ``time.monotonic()`` when the writer's end closed (its process ended).
    closed_at: float | None = None
    #: ``time.monotonic()`` when the reader started (the process was just started).
    started_at: float = field(default_factory=time.monotonic)
    #: ``time.monotonic()`` when a heartbeat last said the optimizer stepped on: a rank whose
    #: steps are not logged (a job held for Join after its phases) still steps.
    stepped_at: float | None = None


class StreamReader:
    """Reads messages in a thread until the writer's end closes; hands progress on as it comes."""

    def __init__(self, fd: int, progress: Callable[[str, int, int], None] | None = None) -> None:
        self.state = StreamState()
        self._progress = progress
        self._file = os.fdopen(fd, "rb")
        self._thread = threading.Thread(target=self._run, name="torchdoctor-stream", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout_s)

    def _run(self) -> None:
        with self._file:
            for line in self._file:
                message = decode(line)
                if message is not None:  # else not one of ours (the pipe is ours alone)
                    self._take(message)
        state = self.state
        if state.step_log is not None:
            state.logged = read_step_log(state.step_log)
        state.closed_at = time.monotonic()

    def _take(self, message: Message) -> None:
        state = self.state
        if isinstance(message, Progress):
            if self._progress is not None:
                extra = (message.detail,) if message.detail else ()  # run --whole's figures
                try:
                    self._progress(message.phase, message.done, message.total, *extra)
                except Exception:  # noqa: BLE001 - the display failed: the record must not
                    self._progress = None  # no more progress shown; the messages still count
                    traceback.print_exc()
        elif isinstance(message, Whole):
            state.whole = message.summary
        elif isinstance(message, Snapshot):
            state.snapshot = message.record
            state.logged_at_snapshot = message.logged
        elif isinstance(message, StepLogAt):
            state.step_log = message.path
        elif isinstance(message, Seen):
            before = (state.seen or {}).get("optimizer_steps", 0)
            if message.seen.get("optimizer_steps", 0) != before:
                state.stepped_at = time.monotonic()
            state.seen = message.seen
        elif isinstance(message, Final):
            state.final = message
            state.final_at = time.monotonic()
        elif isinstance(message, Hello):
            state.hello = message
        elif isinstance(message, Failed):
            state.error = message


def _plain(value: Any) -> Any:
    if isinstance(value, WholeSummary):
        return value.to_wire()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)
