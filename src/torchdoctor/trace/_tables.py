"""Parse a Kineto trace once into compact per-rank column tables, names interned to ids.

Every duration event (``"ph": "X"`` with a ``cat`` and a ``dur``) becomes one row of parallel
``array`` columns (8 bytes or less per field), so a trace of millions of events takes tens of
megabytes instead of the gigabytes a list of dicts would. Names and categories are stored once
in a symbol list and referenced by id, the way HolisticTraceAnalysis compresses its frames.

Categories are stored under their current Kineto names whatever spelling the file uses (see
:data:`CATEGORY_ALIASES`), and the labels PyTorch itself records (``ProfilerStep#N``, the
DataLoader's ``enumerate(DataLoader)#...``) are stored as ``user_annotation`` even where a
release wrote them as operators. So the analyses know one spelling only.
"""

from __future__ import annotations

import os
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._reader import EventStream, TraceFormatError, iter_events

#: Categories the analyses look at, by their Kineto names.
CAT_CPU_OP = "cpu_op"
CAT_USER_ANNOTATION = "user_annotation"
CAT_GPU_USER_ANNOTATION = "gpu_user_annotation"
CAT_RUNTIME = "cuda_runtime"
CAT_DRIVER = "cuda_driver"
CAT_KERNEL = "kernel"
CAT_MEMCPY = "gpu_memcpy"
CAT_MEMSET = "gpu_memset"
CAT_SYNC = "cuda_sync"
CAT_PYTHON = "python_function"
#: Other spellings of the categories above, lower-cased, and the name they are stored under.
#: PyTorch 1.8-1.9 wrote the capitalised names (the TensorBoard profiler plugin reads both);
#: the other accelerators' runtime calls count as runtime calls, as that plugin counts them.
CATEGORY_ALIASES: dict[str, str] = {
    "operator": CAT_CPU_OP,
    "runtime": CAT_RUNTIME,
    "kernel": CAT_KERNEL,
    "memcpy": CAT_MEMCPY,
    "memset": CAT_MEMSET,
    "xpu_runtime": CAT_RUNTIME,
    "mtia_runtime": CAT_RUNTIME,
    "privateuse1_runtime": CAT_RUNTIME,
    "privateuse1_driver": CAT_DRIVER,
}
#: Names of the record_function labels PyTorch records itself, stored as user_annotation when
#: a trace writes them as a CPU op or a Python function.
LABEL_PREFIXES = ("ProfilerStep", "enumerate(DataLoader)")
_LABEL_HOSTS = frozenset({CAT_CPU_OP, CAT_PYTHON})
#: Categories whose args are skipped when parsing: they never link host and device.
_NO_LINK_CATS = frozenset({CAT_CPU_OP, CAT_PYTHON})
#: Categories whose ``bytes`` arg is kept.
_COPY_CATS = frozenset({CAT_MEMCPY, CAT_MEMSET})
#: Skipped events named in the note about them; the rest are counted.
_NAMED_SKIPS = 5
_INF = float("inf")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: The id of the first pid or tid that is not an integer; the next ones count down from it.
FIRST_ID = -2


@dataclass
class RankTrace:
    """One trace file (one rank) as column tables. Row ``i`` of every column is one event.

    Times are microseconds as written in the file (``ts`` absolute, ``dur`` a length). The
    integer columns take 2 or 4 bytes an entry, and 8 (:meth:`widen`) from the first value that
    does not fit.
    ``stream`` is -1 for host events; ``correlation`` is -1 when absent. The args of
    ``cpu_op`` and ``python_function`` events (the bulk of a trace) are not read: neither
    carries a stream or a correlation id. ``cats`` holds the current Kineto names only (see
    the module docstring).
    """

    path: str
    rank: int | None
    world_size: int | None
    metadata: dict[str, Any]
    names: list[str]
    cats: list[str]
    #: position of the event in the file's traceEvents array
    index: array = field(default_factory=lambda: array("I"))
    cat: array = field(default_factory=lambda: array("H"))
    name: array = field(default_factory=lambda: array("I"))
    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    pid: array = field(default_factory=lambda: array("i"))
    tid: array = field(default_factory=lambda: array("i"))
    stream: array = field(default_factory=lambda: array("i"))
    correlation: array = field(default_factory=lambda: array("i"))
    #: bytes moved by gpu_memcpy / gpu_memset rows, by row number
    copy_bytes: dict[int, float] = field(default_factory=dict)
    #: whether any event has a fractional or missing ``ts`` (HTA then rounds timestamps)
    ts_fractional: bool = False
    #: thread names from the metadata events, by (pid, tid)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    uncompressed_bytes: int = 0
    parse_seconds: float = 0.0
    #: what the reader skipped and why (bad durations, entries that are not events), for the report
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)

    #: The integer columns, in the order :func:`load_trace` appends a row's values to them.
    INTEGER_COLUMNS = ("index", "cat", "name", "pid", "tid", "stream", "correlation")

    def widen(self, rows: int) -> None:
        """Hold every integer column in 8 bytes an entry, its first ``rows`` entries kept."""
        for column in self.INTEGER_COLUMNS:
            values = getattr(self, column)
            del values[rows:]
            if values.typecode != "q":
                setattr(self, column, array("q", values))

    @property
    def label(self) -> str:
        """``rank N``, or the file name's first part when the trace names no rank."""
        if self.rank is not None:
            return f"rank {self.rank}"
        return Path(self.path).name.split(".")[0] or Path(self.path).name

    def cat_id(self, cat: str) -> int:
        """Id of category ``cat`` (-1 when the trace has none)."""
        try:
            return self.cats.index(cat)
        except ValueError:
            return -1


def _int_or(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return default


def load_trace(path: str | os.PathLike[str], split: bool | None = None) -> RankTrace:
    """Parse one Kineto trace file (``.json`` or ``.json.gz``) into a :class:`RankTrace`.

    ``split``: read a large plain file in two parts at once, its second in a worker process
    (:mod:`._split`): ``None`` when it pays (the file's size, the cores free), False never.

    Raises:
        TraceFormatError: when the file is missing, truncated, corrupt or not a trace.
    """
    from ._split import read_in_two

    started = time.perf_counter()
    part = read_in_two(path, forced=split) if split is not False else None
    if part is None:
        part = read_rows(path, iter_events(path))
    t = part.trace
    _check_events(path, part, events=part.events)
    if part.non_events:
        t.notes.append(
            f"{path}: skipped {part.non_events} entries of the event array that are not "
            f"event objects (the first: {_short(part.first_non_event)})"
        )
    if part.bad_durations:
        t.notes.append(
            _skipped_note(path, part.bad_durations, "a negative or non-finite duration", "dur")
        )
    if part.bad_times:
        t.notes.append(_skipped_note(path, part.bad_times, "a timestamp that is not finite", "ts"))
    meta = t.metadata = part.metadata
    dist = meta.get("distributedInfo") or {}
    if isinstance(dist, dict):
        t.rank = _int_or(dist.get("rank"), -1) if "rank" in dist else None
        t.world_size = _int_or(dist.get("world_size"), -1) if "world_size" in dist else None
        if t.rank is not None and t.rank < 0:
            t.rank = None
    t.uncompressed_bytes = part.bytes_read
    t.parse_seconds = time.perf_counter() - started
    return t


@dataclass
class Rows:
    """What :func:`read_rows` read of a trace (or of a part of it: :mod:`._split`)."""

    trace: RankTrace
    #: pid and tid values that are not integers (and those past 64 bits) -> their negative ids
    ids: dict[Any, int]
    #: events whose duration is negative, NaN or infinite: (position, name, dur)
    bad_durations: list[tuple[int, Any, Any]]
    #: events whose timestamp is NaN or infinite: (position, name, ts)
    bad_times: list[tuple[int, Any, Any]]
    #: event objects read (a row's ``index`` counts them)
    events: int
    metadata: dict[str, Any]
    bytes_read: int
    has_events: bool
    bare_array: bool
    non_events: int
    first_non_event: Any
    #: whether the events ended at the reader's ``stop`` (:attr:`EventStream.stopped`)
    stopped: bool = False
    #: how many of the rows' pid and tid values were given an id
    id_uses: int = 0
    #: how many integer pids and tids of thread names are at or below the first id given
    low_names: int = 0


def read_rows(path: str | os.PathLike[str], stream: EventStream, first_id: int = FIRST_ID) -> Rows:
    """The rows of ``stream``'s events, names and categories interned; a pid or tid that is
    not an integer gets an id from ``first_id`` down."""
    names: list[str] = []
    name_ids: dict[str, int] = {}
    cats: list[str] = []
    #: category as written -> id of the name it is stored under
    cat_ids: dict[Any, int] = {}
    stored_cats: dict[str, int] = {}
    #: ids of the categories whose args are skipped, of gpu_memcpy/gpu_memset, of label hosts
    no_link: set[int] = set()
    copies: set[int] = set()
    label_hosts: set[int] = set()
    #: ids of the names in LABEL_PREFIXES
    labels: set[int] = set()
    ids: dict[Any, int] = {}  # non-integer pid/tid values -> negative ids
    t = RankTrace(str(path), None, None, {}, names, cats)
    a_ts, a_dur = t.ts.append, t.dur.append
    a_index, a_cat, a_name, a_pid, a_tid, a_stream, a_corr = _appends(t)
    copy_bytes = t.copy_bytes
    fractional = False
    row = 0
    position = -1
    id_uses = 0  # the rows' pid and tid values given an id
    low_names = 0  # integer pids and tids of thread names from ``first_id`` down
    #: events whose duration is negative, NaN or infinite: (position, name, dur)
    bad_durations: list[tuple[int, Any, Any]] = []
    #: events whose timestamp is NaN or infinite: (position, name, ts)
    bad_times: list[tuple[int, Any, Any]] = []
    inf = _INF

    def ident(value: Any) -> int:
        if type(value) is int:
            return value
        if type(value) is not str:  # a float (NaN equals no NaN), a list, an object: its text
            value = repr(value)
        got = ids.get(value)
        if got is None:
            got = ids[value] = first_id - len(ids)
        return got

    for ev in stream:
        position += 1
        ts = ev.get("ts")
        if type(ts) is not int:
            fractional = True
            if ts is None:
                continue
        dur = ev.get("dur")
        if dur is None:  # flows, instants and metadata have no duration
            if ev.get("ph") == "M" and ev.get("name") == "thread_name":
                label = (ev.get("args") or {}).get("name")
                if isinstance(label, str):
                    key = (ev.get("pid"), ev.get("tid"))
                    low_names += sum(type(v) is int and v <= first_id for v in key)
                    t.thread_names[(ident(key[0]), ident(key[1]))] = label
            continue
        cat = ev.get("cat")
        if cat is None or cat == "Trace":
            continue
        try:
            sane = 0 <= dur < inf  # False for NaN too
            if fractional and not -inf < ts < inf:  # NaN or infinite: no time to place it at
                bad_times.append((position, ev.get("name"), ts))
                continue
        except TypeError:
            raise _not_numeric(path, position) from None
        if not sane:
            # A negative length would make negative step and kernel times downstream; such an
            # event is left out, and the report names it.
            bad_durations.append((position, ev.get("name"), dur))
            continue
        name = ev.get("name", "")
        if type(name) is not str:
            name = str(name)
        nid = name_ids.get(name)
        if nid is None:
            nid = name_ids[name] = len(names)
            names.append(name)
            if name.startswith(LABEL_PREFIXES):
                labels.add(nid)
        if type(cat) is not str:  # a number, a list, an object: no Kineto category, its text
            cat = str(cat)  # (1 and True, equal as keys, are two texts)
        cid = cat_ids.get(cat)
        if cid is None:
            cid = cat_ids[cat] = _intern_category(cat, cats, stored_cats)
            stored = cats[cid]
            if stored in _NO_LINK_CATS:
                no_link.add(cid)
            if stored in _COPY_CATS:
                copies.add(cid)
            if stored in _LABEL_HOSTS:
                label_hosts.add(cid)
        args = ev.get("args") if cid not in no_link else None
        if nid in labels and cid in label_hosts:
            cid = _intern_category(CAT_USER_ANNOTATION, cats, stored_cats)
        if args:
            s = args.get("stream")
            stream_id = s if type(s) is int else _int_or(s, -1)
            c = args.get("correlation")
            corr = c if type(c) is int else _int_or(c, -1)
            if "bytes" in args and cid in copies:
                try:
                    copy_bytes[row] = float(args["bytes"])
                except (TypeError, ValueError):
                    pass
        else:
            stream_id = corr = -1
        try:
            a_ts(ts)
            a_dur(dur)
        except (TypeError, OverflowError):  # OverflowError: an integer past a float's range
            del t.ts[row:]
            raise _not_numeric(path, position) from None
        pid = ev.get("pid", -1)
        if type(pid) is not int:
            pid = ident(pid)
            id_uses += 1
        tid = ev.get("tid", -1)
        if type(tid) is not int:
            tid = ident(tid)
            id_uses += 1
        try:
            a_index(position)
            a_cat(cid)
            a_name(nid)
            a_pid(pid)
            a_tid(tid)
            a_stream(stream_id)
            a_corr(corr)
        except OverflowError:  # a value past the narrow columns: every one takes 8 bytes now
            t.widen(row)
            a_index, a_cat, a_name, a_pid, a_tid, a_stream, a_corr = _appends(t)
            if not _INT64_MIN <= pid <= _INT64_MAX:
                pid = ident(str(pid))  # a number no column holds: an id, as its text would be
                id_uses += 1
            if not _INT64_MIN <= tid <= _INT64_MAX:
                tid = ident(str(tid))
                id_uses += 1
            if not _INT64_MIN <= stream_id <= _INT64_MAX:
                stream_id = -1
            if not _INT64_MIN <= corr <= _INT64_MAX:
                corr = -1
            for append, value in zip(
                (a_index, a_cat, a_name, a_pid, a_tid, a_stream, a_corr),
                (position, cid, nid, pid, tid, stream_id, corr),
                strict=True,
            ):
                append(value)
        row += 1

    t.ts_fractional = fractional
    return Rows(
        trace=t,
        ids=ids,
        bad_durations=bad_durations,
        bad_times=bad_times,
        events=position + 1,
        metadata=stream.metadata,
        bytes_read=stream.bytes_read,
        has_events=stream.has_events,
        bare_array=stream.bare_array,
        non_events=stream.non_events,
        first_non_event=stream.first_non_event,
        stopped=stream.stopped,
        id_uses=id_uses,
        low_names=low_names,
    )


def _appends(t: RankTrace) -> tuple[Any, ...]:
    """The ``append`` of each of ``t``'s integer columns (:attr:`RankTrace.INTEGER_COLUMNS`)."""
    return tuple(getattr(t, column).append for column in t.INTEGER_COLUMNS)


def _intern_category(cat: Any, cats: list[str], stored: dict[str, int]) -> int:
    """Id of ``cat``'s current name (``Kernel`` -> ``kernel``) in ``cats``, appended when new
    (``stored``: each name's id, so a trace of many categories is not read in quadratic time)."""
    text = str(cat)
    name = CATEGORY_ALIASES.get(text.lower(), text)
    cid = stored.get(name)
    if cid is None:
        cid = stored[name] = len(cats)
        cats.append(name)
    return cid


def _check_events(path: Any, stream: Any, events: int) -> None:
    """Refuse a JSON file that holds no profiler events: no traceEvents, or an array of non-events.

    ``{"traceEvents": []}`` is an empty trace (analysed, and said to be empty); ``[1, 2, 3]`` or
    ``[]`` is some other JSON, as ``{}`` is.
    """
    hint = "pass a trace written by torch.profiler (a .json or .json.gz file)"
    if not stream.has_events:
        raise TraceFormatError(f"{path}: not a Kineto trace (no traceEvents)", hint)
    if events == 0 and (stream.non_events or stream.bare_array):
        held = (
            f"its event array holds {stream.non_events} value(s), none an event object "
            f"(the first: {_short(stream.first_non_event)})"
            if stream.non_events
            else "the file is an empty JSON array"
        )
        raise TraceFormatError(f"{path}: not a profiler trace: {held}", hint)


def _not_numeric(path: Any, position: int) -> TraceFormatError:
    return TraceFormatError(
        f"{path}: not a readable trace: event {position} has a ts/dur that is not a number "
        "a float can hold",
        "the file may be corrupt; re-export it with torch.profiler",
    )


def _skipped_note(path: Any, bad: list[tuple[int, Any, Any]], what: str, field: str) -> str:
    named = ", ".join(
        f"#{position} {_short(name)} ({value} us)" for position, name, value in bad[:_NAMED_SKIPS]
    )
    more = f" and {len(bad) - _NAMED_SKIPS} more" if len(bad) > _NAMED_SKIPS else ""
    return (
        f"{path}: skipped {len(bad)} event(s) with {what} "
        f"(position in traceEvents, name, {field}): {named}{more}"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
