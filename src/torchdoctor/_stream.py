"""The measurements a script's process streams to the ``torchdoctor run`` process that supervises it.

One JSON object per line on a pipe the supervisor opened. What is sent, and why it is enough to
rebuild a record when the script's process dies at any moment:

- ``progress``: the phase and its progress, for the display (the supervisor draws it);
- ``snapshot``: the whole record so far, at each phase's start (cheap there: between two steps of
  the script, outside any timed step);
- ``step``: one measured or model-alone step's parts (a few numbers, sent as it ends), so steps
  taken since the last snapshot are not lost;
- ``seen``: what the capture saw so far, once a second from a thread, so even a script that never
  steps leaves a trace of what it did;
- ``final``: the finished record and the exit status, the last word of a script that ended in a
  way torchdoctor saw (stopped on purpose, an error, ``sys.exit``, Ctrl-C);
- ``error``: the script could not be run at all (not found), or torchdoctor itself failed;
- ``hello``: first, from a rank of a launched job: which rank it is and its process id.

The writer never raises: a supervisor that went away must not break the user's script.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class StreamWriter:
    """Sends messages on a file descriptor; thread-safe; silent once the reader is gone."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._broken = False

    def send(self, kind: str, **fields: Any) -> None:
        if self._broken:
            return
        line = (json.dumps({"t": kind, **fields}, default=_plain) + "\n").encode()
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
    #: ``(phase, parts_ms, batches)`` of the steps that ended after the last snapshot.
    steps: list[tuple[str, dict[str, float], int]] = field(default_factory=list)
    seen: dict[str, int] | None = None
    final: dict[str, Any] | None = None
    #: The child could not run the script (``message``, ``hint``, ``internal``).
    error: dict[str, Any] | None = None
    #: A rank of a launched job: ``rank``, ``local_rank``, ``world_size``, ``pid``.
    hello: dict[str, Any] | None = None
    #: ``time.monotonic()`` when ``final`` arrived: which rank failed first.
    final_at: float | None = None
    #: ``time.monotonic()`` when the writer's end closed (its process ended).
    closed_at: float | None = None


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
                try:
                    self._take(json.loads(line))
                except (ValueError, TypeError, KeyError):
                    continue  # not one of ours (the pipe is ours alone): nothing to keep
        self.state.closed_at = time.monotonic()

    def _take(self, message: dict[str, Any]) -> None:
        kind = message["t"]
        state = self.state
        if kind == "progress":
            if self._progress is not None:
                self._progress(message["phase"], message["done"], message["total"])
        elif kind == "snapshot":
            state.snapshot = message["record"]
            state.steps.clear()
        elif kind == "step":
            state.steps.append((message["phase"], message["parts"], message["batches"]))
        elif kind == "seen":
            state.seen = message["seen"]
        elif kind == "final":
            state.final = message
            state.final_at = time.monotonic()
        elif kind == "hello":
            state.hello = message
        elif kind == "error":
            state.error = message


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)
