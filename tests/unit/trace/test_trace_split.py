"""A large trace read in two parts at once (``trace._split``): the rows of one reading, always."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import subprocess
import sys

import pytest

from torchdoctor.trace import _split, load_trace, worker_code
from tracegen import training_trace


def _fields(t):
    out = {}
    for f in dataclasses.fields(t):
        if f.name == "parse_seconds":
            continue
        value = getattr(t, f.name)
        out[f.name] = (value.typecode, list(value)) if hasattr(value, "typecode") else value
    return out


def _columns(t):
    """The rows' columns and what is interned, as :func:`~torchdoctor.trace._tables.read_rows`
    leaves them (load_trace adds the notes, the metadata and the sizes)."""
    return {k: v for k, v in _fields(t).items() if k not in ("notes", "metadata", "rank",
            "world_size", "uncompressed_bytes")}  # fmt: skip


def _same_either_way(path, split_expected=True):
    assert (_split.read_in_two(path, forced=True) is not None) == split_expected
    assert _fields(load_trace(path, split=True)) == _fields(load_trace(path, split=False))


def _events(n=400):
    """Events of every kind the rows hold, and some they skip, in both halves of the file."""
    out = []
    for i in range(n):
        kind = i % 9
        if kind == 0:
            out.append({"ph": "M", "name": "thread_name", "pid": f"p{i % 3}", "tid": "t",
                        "args": {"name": f"thread {i}"}})  # fmt: skip
        elif kind == 1:
            out.append([i])  # not an event object
        elif kind == 2:
            out.append({"ph": "X", "cat": "cpu_op", "name": "bad", "ts": i, "dur": -1})
        else:
            out.append({
                "ph": "X",
                "cat": ["cpu_op", "Kernel", "cuda_runtime", "gpu_memcpy", f"cat{i % 11}"][i % 5],
                "name": f"op{i % 17}" if i % 4 else f"ProfilerStep#{i // 50}",
                "pid": [1, f"p{i % 3}", 2**40 if i > n // 2 else 1, f"late{i % 4}" if i > n // 2 else 1][i % 4],
                "tid": ["main", 7, 2**70][i % 3] if i % 5 == 0 else 7,
                "ts": i * 10 + (0.5 if i % 7 == 0 else 0),
                "dur": 5,
                "args": {"correlation": i, "stream": 7, "bytes": 64},
            })  # fmt: skip
    return out


@pytest.mark.parametrize("layout", ["object", "object-after", "array"])
@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":"), (",\n    ", ": ")])
def test_two_parts_give_the_rows_one_reading_gives(tmp_path, layout, separators):
    events = _events()
    if layout == "array":
        doc = events
    else:
        doc = {"schemaVersion": 1, "distributedInfo": {"rank": 3}, "traceEvents": events}
        if layout == "object-after":
            doc |= {"traceName": "after", "deviceProperties": [{"id": 0}, {"id": 1}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, separators=separators))
    _same_either_way(path)
    t = load_trace(path, split=True)
    assert t.notes and "skipped" in t.notes[0]  # the non-events and bad durations of both parts
    if layout == "object-after":
        assert t.metadata["traceName"] == "after" and t.rank == 3


def test_a_cut_inside_a_string_is_read_past(tmp_path, monkeypatch):
    """Names that hold the text between two events: a cut at one of them (inside a string) is
    not where this process's reading ends; it reads on to the end, and the worker's part is not
    used."""
    name = 'x"}, {"ph": "X", "cat": "cpu_op", "name": "fake", "ts": 1, "dur": 1}, {"y'
    events = [{"ph": "X", "cat": "cpu_op", "name": name * 40, "ts": i, "dur": 1} for i in range(60)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    text = path.read_bytes()
    fakes = [k + 3 for k in range(len(text) // 3, len(text)) if text[k : k + 6] == b'}, {\\"'][:5]
    true = text.index(b"}, {", len(text) // 2) + 3
    assert len(fakes) == 5 and text[true : true + 2] == b'{"'
    tables = load_trace(path, split=False)
    whole = _fields(tables)
    joined = []
    join = _split.join
    monkeypatch.setattr(_split, "join", lambda *parts: joined.append(1) or join(*parts))
    for at in fakes:
        monkeypatch.setattr(_split, "cut", lambda *_, at=at, **__: (at, "object"))
        rows = _split.read_in_two(path)  # read on past the cut, to the end: no second part
        assert rows is not None and _columns(rows.trace) == _columns(tables) and not joined
        assert _fields(load_trace(path, split=True)) == whole
    monkeypatch.setattr(_split, "cut", lambda *_, **__: (true, "object"))
    assert _split.read_in_two(path) is not None and joined  # a true boundary is taken
    assert _fields(load_trace(path, split=True)) == whole


def test_ids_counted_past_the_narrow_columns_widen_them_as_one_reading_does(tmp_path):
    events = [{"ph": "X", "cat": f"c{k}", "name": "a", "ts": k, "dur": 1} for k in range(70_000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    _same_either_way(path)
    assert load_trace(path, split=True).cat.typecode == "q"


def test_an_integer_pid_among_the_workers_ids_is_read_whole(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": k, "dur": 1,
               "pid": [f"p{k % 4}", _split._FIRST_ID - 1][k % 2]} for k in range(2_000)]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    _same_either_way(path, split_expected=False)


def test_a_worker_that_fails_or_cannot_start_leaves_the_file_read_whole(tmp_path, monkeypatch):
    path = training_trace(steps=40).write(tmp_path / "t.json")
    whole = _fields(load_trace(path, split=False))

    def refused(*_):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(_split, "start_worker", refused)
    assert _split.read_in_two(path, forced=True) is None
    assert _fields(load_trace(path, split=True)) == whole
    monkeypatch.setattr(
        _split, "start_worker", lambda *_: subprocess.Popen([sys.executable, "-c", "pass"])
    )
    assert _split.read_in_two(path, forced=True) is None  # ended without its rows
    assert _fields(load_trace(path, split=True)) == whole


def test_gzip_small_files_and_one_core_are_read_in_one_part(tmp_path, monkeypatch):
    plain = training_trace(steps=40).write(tmp_path / "t.json")
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert _split.cut(packed, forced=True) is None
    assert _split.cut(plain) is None  # under SPLIT_FROM_MB
    monkeypatch.setattr(_split, "SPLIT_FROM_MB", 0.0)
    monkeypatch.setattr(_split.os, "sched_getaffinity", lambda _: {0, 1})
    assert _split.cut(plain) is not None
    monkeypatch.setattr(_split.os, "sched_getaffinity", lambda _: {0})
    assert _split.cut(plain) is None


def test_a_file_cut_short_in_its_second_part_is_the_error_one_reading_gives(tmp_path):
    text = json.dumps(training_trace(steps=40).document())
    path = tmp_path / "t.json"
    path.write_text(text[: len(text) - 200])
    with pytest.raises(Exception) as whole:
        load_trace(path, split=False)
    with pytest.raises(type(whole.value)) as two:
        load_trace(path, split=True)
    assert str(two.value) == str(whole.value)


def test_no_temporary_folder_leaves_the_file_read_whole(tmp_path, monkeypatch):
    path = training_trace(steps=40).write(tmp_path / "t.json")
    whole = _fields(load_trace(path, split=False))

    def full(**_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_split.tempfile, "TemporaryDirectory", full)
    assert _split.read_in_two(path, forced=True) is None
    assert _fields(load_trace(path, split=True)) == whole


def _event(i, **fields):
    return {"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7,
            "ts": 1000 + 10 * i, "dur": 5, "args": {"stream": 7, "correlation": i}} | fields  # fmt: skip


@pytest.mark.parametrize("case", ["numeric categories", "nan pids", "a thread name's pid"])
def test_values_equal_or_alike_across_the_parts_are_told_as_one_reading_tells_them(tmp_path, case):
    events = [_event(i) for i in range(400)]
    if case == "numeric categories":  # 1 and True are one key to a dict, two texts here
        events[100]["cat"], events[300]["cat"] = 1, True
    elif case == "nan pids":  # NaN equals no NaN: one id for every NaN pid, in either part
        for i in range(0, 400, 50):
            events[i]["pid"] = float("nan")
    else:  # an integer pid where the worker numbers text pids: read whole
        events[300] = {"ph": "M", "name": "thread_name", "pid": _split._FIRST_ID, "tid": 5, "ts": 0,
                       "args": {"name": "an integer"}}  # fmt: skip
        events[310]["pid"] = "y"
        events[320] = {"ph": "M", "name": "thread_name", "pid": "y", "tid": 5, "ts": 0,
                       "args": {"name": "a text"}}  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    _same_either_way(path, split_expected=case != "a thread name's pid")
    t = load_trace(path, split=True)
    if case == "nan pids":
        assert len({p for p in t.pid if p < -1}) == 1
    if case == "a thread name's pid":
        assert sorted(t.thread_names.values()) == ["a text", "an integer"]


def test_a_pipe_is_read_once_as_it_comes(tmp_path):
    source = training_trace(steps=5).write(tmp_path / "t.json")
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    assert _split.cut(fifo, forced=True) is None  # never opened: a pipe's bytes are read once
    feed = subprocess.Popen(f"cat {source} > {fifo}", shell=True)
    try:
        assert len(load_trace(fifo)) == len(load_trace(source))
    finally:
        feed.wait()


def test_a_worker_under_safe_path_keeps_the_path_it_was_given():
    code = worker_code("builtins", "print") + "\nprint(sys.path[0])"
    env = {**os.environ, "PYTHONPATH": "/a-marker", "PYTHONSAFEPATH": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.splitlines()[-1] == "/a-marker", done.stdout + done.stderr
