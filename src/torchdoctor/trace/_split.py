"""A large trace file read in two parts at once: its second part in a worker process.

Parsing is most of ``analyze``'s time, and one parse runs on one core. A plain (not gzipped)
file of :data:`SPLIT_FROM_MB` or more, with a second core free, is cut near its middle at an
event boundary: a worker reads the events from there to the end (and the document's keys after
them) while this process reads the events before it, and the two sets of rows are joined,
names, categories and ids mapped onto this process's.

Where the cut falls is found by looking for the text between two events (``},`` then ``{``),
which a string inside an event may also hold. It is proved by this process's own reading: from
the start of the document, its events must end exactly at the cut, just after a separator of the
event array. Where the reading meets the cut anywhere else (inside a string or an event,
before the events or after them) it reads on to the end, and those are the rows; where the
worker failed, was killed or could not start, the file is read whole here. The rows are those of
one reading either way.
"""

from __future__ import annotations

import os
import pickle
import re
import stat
import tempfile
import time
from array import array
from collections.abc import Iterable
from pathlib import Path

from ._reader import EventStream, TraceFormatError
from ._tables import FIRST_ID, RankTrace, Rows, read_rows
from ._workers import end_with, end_workers, start_worker, worker_code

#: Plain files from this size (MB) are read in two parts: below it a worker's start (about
#: 0.15 s) and the join take about what the second core saves.
SPLIT_FROM_MB = 64.0
#: How far past the middle the cut is looked for.
_LOOK_BYTES = 4 << 20
_BETWEEN_EVENTS = re.compile(rb"\},\s*\{")
_WORKER_CODE = worker_code("torchdoctor.trace._split", "_worker")
#: The worker's first id of a pid or tid that is not an integer (then down from it): far from
#: any real one, so that the join tells its ids from integers and numbers them as one reading.
_FIRST_ID = -(2**30)
#: How often this process looks whether the worker ended, in seconds.
_POLL_S = 0.01


def cut(path: str | os.PathLike[str], forced: bool | None = None) -> tuple[int, str] | None:
    """Where to cut ``path`` (the byte an event starts at) and its layout (``"object"``: a
    ``traceEvents`` array, ``"array"``: a bare one); ``None`` when it is not worth it or cannot
    be: gzip, small (unless ``forced``), one usable core."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # a pipe or a device: read once, as it comes
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(64).lstrip()
            if head[:2] == b"\x1f\x8b" or head[:1] not in (b"{", b"["):
                return None
            if not forced:
                if size < SPLIT_FROM_MB * 1e6 or len(os.sched_getaffinity(0)) < 2:
                    return None
            fh.seek(size // 2)
            found = _BETWEEN_EVENTS.search(fh.read(_LOOK_BYTES))
    except (OSError, AttributeError):  # unreadable (named later), no sched_getaffinity
        return None
    if found is None:
        return None
    return size // 2 + found.end() - 1, "object" if head[:1] == b"{" else "array"


def read_in_two(path: str | os.PathLike[str], forced: bool | None = None) -> Rows | None:
    """The rows of ``path`` read in two parts at once (the module's docstring); ``None`` when
    it is not cut, or the cut was not proved: the caller reads it whole."""
    where = cut(path, forced)
    if where is None:
        return None
    stop, layout = where
    try:
        folder = tempfile.TemporaryDirectory(prefix="torchdoctor-split-")
    except OSError:  # no temporary folder to be had (read-only, full): one reading
        return None
    with folder:
        out = Path(folder.name, "rest")
        try:
            proc = start_worker(_WORKER_CODE, [str(path), str(stop), layout, str(out)])
        except OSError:
            return None
        try:
            first = _first_part(path, stop)
            if first is None or not first.stopped:
                return first  # None: an error, told by one reading; else read whole past the cut
            while proc.poll() is None:
                time.sleep(_POLL_S)
            rest = _load(out)
        finally:
            end_workers([proc])
    if rest is None:
        return None
    return join(first, rest)


def _first_part(path: str | os.PathLike[str], stop: int) -> Rows | None:
    """The rows before ``stop`` when this reading ends exactly there (``stopped``); the whole
    file's when it met ``stop`` inside an event or a string and read on; ``None`` when the file
    is not readable (one reading then says why, in its words)."""
    try:
        return read_rows(path, EventStream(path, stop=stop))
    except TraceFormatError:
        return None


def _load(out: Path) -> Rows | None:
    try:
        with open(out, "rb") as fh:
            rows = pickle.load(fh)
    except Exception:  # noqa: BLE001 - no result: the file is read whole here
        return None
    return rows if isinstance(rows, Rows) else None


def _worker(argv: list[str]) -> None:
    """A worker: the rows from byte ``argv[1]`` to the end of ``argv[0]`` pickled to
    ``argv[3]`` (nothing when they cannot be read: the file is then read whole there)."""
    path, start, layout, out, parent = argv
    end_with(int(parent))
    try:
        rows = read_rows(path, EventStream(path, start=int(start), layout=layout), _FIRST_ID)
    except TraceFormatError:
        return
    if rows.ids and (rows.low_names or _in_id_range(rows) != rows.id_uses):
        return  # an integer pid or tid among the ids: only one reading numbers them as it does
    partial = out + ".partial"
    with open(partial, "wb") as fh:
        pickle.dump(rows, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(partial, out)


def _in_id_range(rows: Rows) -> int:
    """How many pid and tid values of the rows are in the worker's range of ids."""
    low = _FIRST_ID - len(rows.ids)
    t = rows.trace
    return sum(1 for column in (t.pid, t.tid) for v in column if low < v <= _FIRST_ID)


def join(first: Rows, rest: Rows) -> Rows:
    """``first`` then ``rest`` as the rows one reading of the whole file gives."""
    t, r = first.trace, rest.trace
    names = _map(r.names, t.names)
    cats = _map(r.cats, t.cats)
    ids = first.ids
    for value in rest.ids:  # in order of arrival, as one reading numbers them
        ids.setdefault(value, FIRST_ID - len(ids))
    id_of = {old: ids[value] for value, old in rest.ids.items()}
    rows = len(t)
    mapped = {
        "index": lambda: (i + first.events for i in r.index),
        "cat": lambda: (cats[c] for c in r.cat),
        "name": lambda: (names[n] for n in r.name),
        "pid": lambda: (id_of.get(v, v) for v in r.pid) if id_of else r.pid,
        "tid": lambda: (id_of.get(v, v) for v in r.tid) if id_of else r.tid,
        "stream": lambda: r.stream,
        "correlation": lambda: r.correlation,
    }
    if not _fits(t, r, first.events, cats, names, id_of.values()):
        t.widen(rows)
    for name, values in mapped.items():  # a column at a time, each of the worker's let go
        column = getattr(t, name)
        given = values()
        column.extend(given if getattr(given, "typecode", None) == column.typecode else
                      array(column.typecode, given))  # fmt: skip
        setattr(r, name, array(column.typecode))
    t.ts.extend(r.ts)
    t.dur.extend(r.dur)
    t.copy_bytes.update((row + rows, n) for row, n in r.copy_bytes.items())
    for (pid, tid), label in r.thread_names.items():
        t.thread_names[(id_of.get(pid, pid), id_of.get(tid, tid))] = label
    t.ts_fractional = t.ts_fractional or r.ts_fractional
    first.bad_durations.extend((p + first.events, n, d) for p, n, d in rest.bad_durations)
    first.bad_times.extend((p + first.events, n, ts) for p, n, ts in rest.bad_times)
    return Rows(
        trace=t,
        ids=ids,
        bad_durations=first.bad_durations,
        bad_times=first.bad_times,
        events=first.events + rest.events,
        metadata={**first.metadata, **rest.metadata},
        bytes_read=first.bytes_read + rest.bytes_read,
        has_events=True,
        bare_array=first.bare_array,
        non_events=first.non_events + rest.non_events,
        first_non_event=first.first_non_event if first.non_events else rest.first_non_event,
    )


def _map(theirs: list[str], ours: list[str]) -> list[int]:
    """Each of ``theirs``'s ids as an id of ``ours`` (appended to it when new)."""
    index = {name: i for i, name in enumerate(ours)}
    out = []
    for name in theirs:
        i = index.get(name)
        if i is None:
            i = index[name] = len(ours)
            ours.append(name)
        out.append(i)
    return out


def _fits(t: RankTrace, rest: RankTrace, events: int, cats: list[int], names: list[int],
          ids: Iterable[int]) -> bool:  # fmt: skip
    """Whether ``rest``'s values, mapped, fit ``t``'s narrow columns (one reading would have
    widened them at the first that did not)."""
    if t.pid.typecode == "q" or rest.pid.typecode == "q":
        return False  # one of them is wide already: both are
    largest = {"cat": max(cats, default=0), "name": max(names, default=0)}
    largest["index"] = events + (rest.index[-1] if rest.index else 0)
    if any(v >= 1 << (8 * getattr(t, c).itemsize) for c, v in largest.items()):
        return False
    return min(ids, default=0) >= -(2**31)
