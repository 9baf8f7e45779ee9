"""Stream the events of a Kineto (torch.profiler) JSON trace without loading the whole file.

A Kineto trace is one JSON object whose ``traceEvents`` array holds millions of small objects.
Loading it with ``json.load`` needs several times the file size in Python objects; here the
array is walked one event at a time with the standard library's C scanner
(``json.JSONDecoder.raw_decode``) over a sliding text buffer, so memory stays bounded by the
buffer and by what the caller keeps. ``ijson`` with its C (yajl2_c) backend is an optional
alternative; ``benchmarks/trace_parse.py`` measures both side by side.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._errors import TorchdoctorError

#: Bytes read from the file per refill. 1 MiB keeps the buffer small while each raw_decode
#: call still sees thousands of events.
CHUNK_BYTES = 1 << 20

#: One event larger than this cannot be a real Kineto event; the file is corrupt.
MAX_EVENT_CHARS = 64 << 20
#: The least text worth decoding as one slice of events (:meth:`EventStream._batch`).
BATCH_MIN_CHARS = 64 << 10

_WS = " \t\n\r"


class TraceFormatError(TorchdoctorError):
    """The file is not a readable Kineto trace (truncated, corrupt, or another format)."""


def open_text(path: str | os.PathLike[str]) -> io.BufferedIOBase:
    """Open a ``.json`` or ``.json.gz`` trace as a binary stream (gzip detected by magic)."""
    p = Path(path)
    try:
        raw = open(p, "rb")  # noqa: SIM115 - returned to the caller
    except FileNotFoundError:
        raise TraceFormatError(f"{p}: no such file", "pass a .json or .json.gz trace") from None
    except IsADirectoryError:
        raise TraceFormatError(f"{p}: is a directory") from None
    except OSError as exc:
        raise TraceFormatError(f"{p}: cannot read ({exc.strerror})") from None
    magic = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw  # type: ignore[return-value]


class EventStream:
    """Iterate the ``traceEvents`` of one trace; the other top-level keys land in ``metadata``.

    ``metadata`` is complete only after the iteration finished, because Kineto may write keys
    (``traceName``, ``deviceProperties``) after the events.

    Args:
        path: a ``.json`` or ``.json.gz`` Kineto trace.
        start: read from this byte of a plain file on, where an event of the document's event
            array begins (a reader of the file's second part); ``layout`` says which document
            that array is in: ``"object"`` (its ``traceEvents``) or ``"array"`` (bare).
        stop: end the events at the event array's separator just before this byte
            (:attr:`stopped`), where a reader from ``start=stop`` goes on. When the reading
            meets ``stop`` anywhere else (inside an event or a string, before the events or
            after them), it reads on to the document's end as without it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        start: int = 0,
        stop: int | None = None,
        layout: str = "object",
    ) -> None:
        self.path = Path(path)
        self._start, self._stop, self._layout = start, stop, layout
        #: Whether the events ended at ``stop``, after a separator between two events (a reader
        #: from ``stop`` on reads the rest); False when the document ended before it.
        self.stopped = False
        #: Set while the reading looks whether it is at ``stop`` between two events.
        self._at_separator = False
        self.metadata: dict[str, Any] = {}
        #: Uncompressed bytes read so far (for MB/s figures).
        self.bytes_read = 0
        #: Whether a traceEvents array (or a bare event array) was found.
        self.has_events = False
        #: Whether the document is a bare array (the Trace Event Format allows one).
        self.bare_array = False
        #: Entries of the event array that are not objects (skipped), and the first of them.
        self.non_events = 0
        self.first_non_event: Any = None
        self._decoder = json.JSONDecoder()
        #: Read events one at a time while the cursor is before this (:meth:`_batch`).
        self._one_by_one_until = -1
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._fh: io.BufferedIOBase | None = None
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")

    # --- buffer --------------------------------------------------------------------------

    def _fill(self) -> bool:
        """Append a chunk to the buffer, dropping what was consumed; False at end of file."""
        if self._eof:
            return False
        assert self._fh is not None
        size = CHUNK_BYTES
        if self._stop is not None:
            left = self._stop - self._start - self.bytes_read
            if left <= 0 and self._at_separator:
                return False  # at ``stop``, between two events
            if left <= 0:
                self._stop = None  # met elsewhere than between two events: read on
            else:
                size = min(size, left)
        try:
            data = self._fh.read(size) if size > 0 else b""
        except (EOFError, OSError, zlib.error) as exc:
            raise self._error(f"the compressed stream is damaged ({exc})") from None
        self.bytes_read += len(data)
        self._one_by_one_until -= self._pos  # the buffer's start moves to the cursor
        if not data:
            self._eof = True
            self._buf = self._buf[self._pos :] + self._text.decode(b"", final=True)
            self._pos = 0
            return False
        self._buf = self._buf[self._pos :] + self._text.decode(data)
        self._pos = 0
        return True

    def _skip_ws(self) -> str:
        """Skip whitespace and return the next character ('' at end of file)."""
        while True:
            buf, pos, n = self._buf, self._pos, len(self._buf)
            while pos < n and buf[pos] in _WS:
                pos += 1
            self._pos = pos
            if pos < n:
                return buf[pos]
            if not self._fill():
                return ""

    def _expect(self, chars: str, what: str) -> str:
        ch = self._skip_ws()
        if not ch or ch not in chars:
            if not ch:
                found = "the end of the file"
            elif ch == "\ufffd" or (not ch.isprintable() and ch not in _WS):
                found = "binary data (not UTF-8 JSON text)"
            else:
                found = repr(ch)
            raise self._error(f"expected {what} but found {found}")
        self._pos += 1
        return ch

    def _value(self) -> Any:
        """Decode one JSON value at the cursor, refilling the buffer until it is complete."""
        self._skip_ws()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except RecursionError:
                # Profiler events nest a few levels; thousands mean a file made some other way,
                # and the C scanner's recursion limit would otherwise escape as a traceback.
                raise self._error("a value is nested too deeply to be a profiler event") from None
            except json.JSONDecodeError as exc:
                # Incomplete value at the end of the buffer: read more and retry. A value that
                # still fails with the whole file read (or absurdly long) is corrupt.
                if len(self._buf) - self._pos > MAX_EVENT_CHARS:
                    raise self._error(f"invalid JSON ({exc.msg})") from None
                at_end = exc.pos >= len(self._buf.rstrip()) or exc.msg.startswith("Unterminated")
                if not self._fill():
                    if at_end:
                        raise self._error("the file ends early (truncated)") from None
                    raise self._error(f"invalid JSON ({exc.msg})") from None
                continue
            except ValueError as exc:  # a number Python will not convert (over 4300 digits)
                raise self._error(f"a value cannot be read ({exc})") from None
            if end == len(self._buf) and not self._eof:
                # A number may continue in the next chunk ("12" + "34"); re-read to be sure.
                if self._fill():
                    continue
            self._pos = end
            return value

    def _error(self, what: str) -> TraceFormatError:
        where = f" after {self.bytes_read / 1e6:.1f} MB" if self.bytes_read > 1e6 else ""
        return TraceFormatError(
            f"{self.path}: not a readable trace: {what}{where}",
            "the file may be truncated or corrupt; re-export it with "
            "torch.profiler (export_chrome_trace or tensorboard_trace_handler)",
        )

    # --- structure ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._fh = open_text(self.path)
        try:
            if self._start:
                self._fh.seek(self._start)
                self.has_events = True
                self.bare_array = self._layout == "array"
                yield from self._events()
                if not self.bare_array and not self.stopped:
                    if self._expect(",}", "',' or '}'") == ",":
                        yield from self._members()
            else:
                yield from self._document()
        finally:
            self._fh.close()

    def _document(self) -> Iterator[dict[str, Any]]:
        ch = self._skip_ws()
        if ch == "[":
            # The Trace Event Format also allows a bare array of events.
            self._pos += 1
            self.has_events = self.bare_array = True
            yield from self._events()
            return
        self._expect("{", "a JSON object '{' at the start")
        if self._skip_ws() == "}":
            self._pos += 1
            return
        yield from self._members()

    def _members(self) -> Iterator[dict[str, Any]]:
        """The document object's members from the cursor (at a key) to its closing ``}``."""
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise self._error("expected a key")
            self._expect(":", "':'")
            if key == "traceEvents":
                self._expect("[", "the traceEvents array '['")
                self.has_events = True
                yield from self._events()
                if self.stopped:
                    return
            else:
                self.metadata[key] = self._value()
            if self._expect(",}", "',' or '}'") == "}":
                return

    def _events(self) -> Iterator[dict[str, Any]]:
        if self._skip_ws() == "]":
            self._pos += 1
            return
        while True:
            batch = self._batch()
            for event in batch if batch is not None else (self._value(),):
                if isinstance(event, dict):
                    yield event
                else:
                    if not self.non_events:
                        self.first_non_event = event
                    self.non_events += 1
            if batch is None and self._expect(",]", "',' or ']' between events") == "]":
                return
            # the cursor is past a ',' (a batch's last, or the one just read)
            if self._stop is not None:
                self._at_separator = True
                try:
                    at_stop = self._skip_ws() == ""
                finally:
                    self._at_separator = False
                if at_stop:
                    self.stopped = True  # at ``stop``: a reader from there reads the rest
                    return

    def _batch(self) -> list[Any] | None:
        """The whole events between the cursor and the buffer's last event boundary (``}``,
        ``,``, ``{``), decoded in one call of the C scanner; ``None`` to read one at a time.

        A boundary found inside a string leaves that string open in the slice, and one inside an
        event leaves the event open: either way the slice does not decode and nothing is taken,
        so a decoded slice is whole events. After a slice that did not decode, events are read
        one at a time up to its end (one failed attempt per buffer at most).
        """
        buf, pos = self._buf, self._pos
        if pos < self._one_by_one_until or len(buf) - pos < BATCH_MIN_CHARS:
            return None
        cut = buf.rfind("},", pos)
        for _ in range(8):  # the last '},' followed by '{', among the last few
            if cut - pos < BATCH_MIN_CHARS:
                return None
            if buf[cut + 2 : cut + 66].lstrip(_WS)[:1] == "{":
                break
            cut = buf.rfind("},", pos, cut)
        else:
            return None
        try:
            events = self._decoder.decode("[" + buf[pos : cut + 1] + "]")
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError, as is a
            # number too long to convert: read one by one, and fail where the value is
            self._one_by_one_until = cut
            return None
        self._pos = cut + 2
        return events


def iter_events(path: str | os.PathLike[str]) -> EventStream:
    """The streaming reader over ``path``; iterate it for events, then read ``.metadata``."""
    return EventStream(path)
