"""The streaming trace reader and the column tables: formats, chunk boundaries, bad files."""

from __future__ import annotations

import gzip
import json

import pytest

from torchdoctor.analysis.trace_analysis import analyze_trace
from torchdoctor.trace import TraceFormatError, _reader, find_trace_files, iter_events, load_trace
from tracegen import TraceBuilder, training_trace


def _events(path):
    stream = iter_events(path)
    return list(stream), stream.metadata


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_reads_plain_and_gzip_with_metadata_on_both_sides(tmp_path, name):
    b = training_trace(rank=3)
    doc = {"deviceProperties": [{"name": "X"}], "traceEvents": b.events, "traceName": "after"}
    data = json.dumps(doc).encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    events, meta = _events(path)
    assert events == b.events
    assert meta == {"deviceProperties": [{"name": "X"}], "traceName": "after"}


def test_events_split_across_tiny_chunks_parse_the_same(tmp_path, monkeypatch):
    b = training_trace()
    b.events.append({"ph": "X", "cat": "cpu_op", "name": "big", "ts": 123456789012, "dur": 1.5})
    path = b.write(tmp_path / "t.json")
    expected, _ = _events(path)
    monkeypatch.setattr(_reader, "CHUNK_BYTES", 7)  # every number and string gets cut somewhere
    events, meta = _events(path)
    assert events == expected == b.events
    assert meta["distributedInfo"] == {"rank": 0, "world_size": 1}


def test_bare_event_array_is_accepted(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2}]))
    t = load_trace(path)
    assert len(t) == 1 and t.rank is None


def test_tables_intern_names_and_keep_gpu_fields(tmp_path):
    t = load_trace(training_trace(rank=2).write(tmp_path / "t.json.gz"))
    assert t.rank == 2 and t.world_size == 1
    assert t.names.count("aten::mul") == 1  # interned once, referenced by 30 rows
    kernel = t.cat_id("kernel")
    rows = [i for i in range(len(t)) if t.cat[i] == kernel]
    assert len(rows) == 30
    assert {t.stream[i] for i in rows} == {7}
    runtime = {t.correlation[i] for i in range(len(t)) if t.cat[i] == t.cat_id("cuda_runtime")}
    assert {t.correlation[i] for i in rows} == runtime


def test_old_category_names_are_stored_under_the_current_ones(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 20, cat="cpu_op")
    b.host("aten::mm", 20, 30)
    b.launch(
        "cudaMemcpyAsync",
        20,
        5,
        "Memcpy HtoD (Pageable -> Device)",
        30,
        4,
        cat="gpu_memcpy",
        bytes=4096,
    )
    b.launch("cudaMemsetAsync", 40, 5, "Memset (Device)", 45, 1, cat="gpu_memset", bytes=64)
    b.launch("cudaLaunchKernel", 50, 5, "gemm", 55, 10)
    new = load_trace(b.write(tmp_path / "new.json"))
    b.spelling = "old"
    old_doc = b.document()
    old_doc["traceEvents"].append({**old_doc["traceEvents"][-1], "cat": "kernel"})  # both at once
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old_doc))
    old = load_trace(path)
    assert sorted(old.cats) == sorted(new.cats)
    assert "Operator" not in old.cats and "Kernel" not in old.cats
    # ProfilerStep and the DataLoader label, written as operators, are stored as annotations.
    cats_of = {old.names[old.name[i]]: old.cats[old.cat[i]] for i in range(len(old))}
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert cats_of["ProfilerStep#1"] == cats_of[loader] == "user_annotation"
    assert cats_of["aten::mm"] == "cpu_op"
    assert old.copy_bytes == new.copy_bytes and sorted(old.copy_bytes.values()) == [64.0, 4096.0]
    gpu = [i for i in range(len(old)) if old.stream[i] == 7]
    assert len(gpu) == 4 and {old.cats[old.cat[i]] for i in gpu} == {
        "gpu_memcpy",
        "gpu_memset",
        "kernel",
    }


def test_a_category_that_is_not_a_string_is_kept_as_text(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": ["x"], "ts": 1, "dur": 2}]}))
    t = load_trace(path)
    assert t.cats == ["['x']"] and len(t) == 1


@pytest.mark.parametrize(
    "content, words",
    [
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "na', "ends early"),
        (b'{"traceEvents": [{"ph": "X"}, ', "ends early"),
        (b'{"traceEvents": [{"ph": "X", "ts": nope}]}', "invalid JSON"),
        (b'{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "',' or ']'"),
        (b"", "expected a JSON object"),
        (b"hello", "expected a JSON object"),
    ],
)
def test_truncated_or_corrupt_json_is_a_clear_error(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert words in err.value.message
    assert "truncated or corrupt" in err.value.hint


def test_truncated_gzip_is_a_clear_error(tmp_path):
    data = gzip.compress(json.dumps(training_trace().document()).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="not a readable trace"):
        load_trace(path)


@pytest.mark.parametrize("text", ["{}", '{"schema_version": 1, "steps": []}'])
def test_json_without_trace_events_is_rejected(tmp_path, text):
    path = tmp_path / "record.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match="no traceEvents"):
        load_trace(path)


def test_find_trace_files_expands_directories(tmp_path):
    (tmp_path / "run").mkdir()
    a = training_trace(rank=0).write(tmp_path / "run" / "a.json")
    b = training_trace(rank=1).write(tmp_path / "run" / "b.json.gz")
    (tmp_path / "run" / "notes.txt").write_text("x")
    assert find_trace_files([tmp_path / "run"]) == sorted([a, b])
    with pytest.raises(TraceFormatError, match="no such file"):
        find_trace_files([tmp_path / "missing.json"])
    # Beside profiler output (*.pt.trace.json), other JSON files are not taken for traces.
    (tmp_path / "tb").mkdir()
    c = training_trace().write(tmp_path / "tb" / "host_1.123.pt.trace.json")
    (tmp_path / "tb" / "analysis.json").write_text("{}")
    assert find_trace_files([tmp_path / "tb"]) == [c]
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceFormatError, match="no .json"):
        find_trace_files([tmp_path / "empty"])
    # a file named twice, or through a link, is one rank's trace, once
    (tmp_path / "link.json").symlink_to(a)
    assert find_trace_files([tmp_path / "run", a, tmp_path / "link.json"]) == sorted([a, b])


def test_fractional_timestamps_are_flagged(tmp_path):
    b = TraceBuilder()
    b.host("a", 10.5, 2.25)
    t = load_trace(b.write(tmp_path / "t.json"))
    assert t.ts_fractional and t.ts[0] == 10.5 and t.dur[0] == 2.25


def test_deeply_nested_args_are_a_clear_error_not_a_recursion_error(tmp_path):
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "args": ' + deep + "}]}")
    with pytest.raises(TraceFormatError, match="nested too deeply"):
        load_trace(path)


@pytest.mark.parametrize(
    "text, words",
    [
        ("[1, 2, 3]", "none an event object (the first: 1)"),
        ('{"traceEvents": ["x"]}', "none an event object (the first: 'x')"),
        ("[]", "an empty JSON array"),
    ],
)
def test_json_arrays_without_event_objects_are_not_traces(tmp_path, text, words):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match="not a profiler trace") as err:
        load_trace(path)
    assert words in err.value.message


def test_an_empty_trace_event_array_is_an_empty_trace_not_an_error(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": []}')
    t = load_trace(path)
    assert len(t) == 0 and not t.notes


def test_non_event_entries_beside_events_are_skipped_with_a_note(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2}, 7]))
    t = load_trace(path)
    assert len(t) == 1
    assert t.notes and "skipped 1 entries" in t.notes[0] and "the first: 7" in t.notes[0]


def test_negative_and_non_finite_durations_are_skipped_and_named(tmp_path):
    b = TraceBuilder()
    b.host("good", 0, 5)
    b.host("backwards", 10, -3)
    for i in range(6):
        b.host(f"bad{i}", 20 + i, -1)
    b.host("good2", 40, 1)
    b.events.append({"ph": "X", "cat": "cpu_op", "name": "nan", "ts": 50, "dur": float("nan")})
    t = load_trace(b.write(tmp_path / "t.json"))
    assert [t.names[t.name[i]] for i in range(len(t))] == ["good", "good2"]
    assert min(t.dur) >= 0
    (note,) = t.notes
    assert "skipped 8 event(s) with a negative or non-finite duration" in note
    assert "#1 'backwards' (-3 us)" in note and "and 3 more" in note


def test_binary_file_is_named_as_binary(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(bytes(range(128, 256)))
    with pytest.raises(TraceFormatError, match="binary data"):
        load_trace(path)


def _awkward_events(n: int) -> list:
    """Events whose strings and args hold the text of an event boundary, and entries that are
    not events: a slice cut at a false boundary must not decode."""
    out: list = []
    for i in range(n):
        name = "f(a}, {b)" if i % 7 == 0 else f"op{i}"
        args = {"inner": {"x": i}, "after": "},{"} if i % 5 == 0 else {"External id": i}
        out.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": i * 10, "dur": 5, "args": args})
        if i % 997 == 0:
            out.append(i)  # not an event: counted and skipped
    return out


@pytest.mark.parametrize("indent", [None, 1])
def test_events_decoded_in_slices_are_those_decoded_one_by_one(tmp_path, monkeypatch, indent):
    events = _awkward_events(6000)  # about 700 KB: several slices and chunks
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "traceName": "t"}, indent=indent))
    monkeypatch.setattr(_reader, "CHUNK_BYTES", 200_000)
    real, decoded = _reader.EventStream._batch, []

    def counted(self):
        got = real(self)
        decoded.append(got is not None)
        return got

    monkeypatch.setattr(_reader.EventStream, "_batch", counted)
    stream = iter_events(path)
    sliced = list(stream)
    assert sum(decoded) >= 2  # slices were decoded (and some refused: false boundaries)
    monkeypatch.setattr(_reader.EventStream, "_batch", lambda self: None)
    one_by_one = list(iter_events(path))
    assert sliced == one_by_one == [e for e in events if isinstance(e, dict)]
    assert stream.non_events == 7 and stream.first_non_event == 0
    assert stream.metadata == {"traceName": "t"}


def test_a_large_trace_cut_short_is_a_clear_error_after_its_slices(tmp_path):
    text = json.dumps({"traceEvents": _awkward_events(6000)})
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) * 2 // 3])
    with pytest.raises(TraceFormatError, match="the file ends early"):
        load_trace(path)


def test_a_number_too_long_to_convert_is_a_clear_error_after_the_events_before_it(tmp_path):
    """Python refuses integers of over 4300 digits with a ValueError, not a JSONDecodeError: it
    escaped a slice whole (none of the events before it read) and ended in a traceback."""
    events = [{"ph": "X", "name": f"op{i}", "ts": i, "dur": 1} for i in range(3000)]
    text = json.dumps({"traceEvents": events})[:-2] + ', {"ts": ' + "9" * 4400 + "}]}"
    path = tmp_path / "long.json"
    path.write_text(text)
    read = []
    with pytest.raises(TraceFormatError, match="a value cannot be read .*4300 digits"):
        for event in iter_events(path):
            read.append(event)
    assert len(read) == 3000


def test_after_a_slice_that_did_not_decode_the_next_buffers_are_sliced(tmp_path, monkeypatch):
    """A false boundary (a name holding '}, {') at the end of the first buffer: the next
    buffers' events are still decoded as slices (the one-by-one mark moves with the buffer)."""
    monkeypatch.setattr(_reader, "CHUNK_BYTES", 100_000)
    head = '{"traceEvents": ['
    one = json.dumps({"ph": "X", "name": "op", "ts": 1, "dur": 1})
    before = (100_000 - len(head) - 40) // (len(one) + 2)
    awkward = json.dumps({"ph": "X", "name": "x" * 20 + "}, {" + "y" * 200, "ts": 2, "dur": 1})
    events = [one] * before + [awkward] + [one] * 5000
    path = tmp_path / "t.json"
    path.write_text(head + ", ".join(events) + "]}")
    text = path.read_text()
    assert text.find("}, {y") < 100_000 < text.find('"ts": 2')  # the name spans the buffer end
    real, decoded = _reader.EventStream._batch, []

    def counted(self):
        got = real(self)
        decoded.append(got is not None)
        return got

    monkeypatch.setattr(_reader.EventStream, "_batch", counted)
    assert len(list(iter_events(path))) == before + 5001
    first_refused = decoded.index(False)
    assert first_refused <= 1 and decoded[first_refused:].count(True) >= 2, decoded[:12]


def test_columns_take_four_bytes_an_id_until_a_value_needs_eight(tmp_path):
    def event(name, cat="cpu_op", **fields):
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "ts": 10,
            "dur": 2,
            "pid": 1,
            "tid": 2,
            **fields,
        }

    narrow = load_trace(_write(tmp_path / "narrow.json", [event("a"), event("b")]))
    assert [narrow.pid.itemsize, narrow.correlation.itemsize, narrow.index.itemsize] == [4, 4, 4]
    wide = [
        event("a"),
        event("k", "kernel", args={"stream": 2**33, "correlation": 7}),
        event("h", pid=2**40, tid=-(2**35)),
        event("r", "cuda_runtime", args={"correlation": 2**62}),
        event("z", pid=2**70, args={}),  # no column holds it: an id, as its text would be
        event("s", "kernel", args={"stream": -(2**80), "correlation": 2**80}),
    ]
    t = load_trace(_write(tmp_path / "wide.json", wide))
    assert len(t) == 6 and all(len(getattr(t, c)) == 6 for c in t.INTEGER_COLUMNS)
    assert list(t.index) == [0, 1, 2, 3, 4, 5]
    assert [t.names[n] for n in t.name] == ["a", "k", "h", "r", "z", "s"]
    assert t.stream[1] == 2**33 and t.correlation[1] == 7
    assert (t.pid[2], t.tid[2]) == (2**40, -(2**35))
    assert t.correlation[3] == 2**62
    assert t.pid[4] < 0 and t.pid[4] != -1
    assert (t.stream[5], t.correlation[5]) == (-1, -1)


def test_more_categories_than_two_bytes_number_are_read(tmp_path):
    events = [{"ph": "X", "cat": f"c{k}", "name": "a", "ts": k, "dur": 1} for k in range(70_000)]
    t = load_trace(_write(tmp_path / "cats.json", events))
    assert len(t) == 70_000 and t.cats[t.cat[69_999]] == "c69999"


def _write(path, events):
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _steps_and(event):
    steps = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
         "ts": 100 * k, "dur": 100} for k in (1, 2)
    ]  # fmt: skip
    return steps + [{"ph": "X", "cat": "cpu_op", "name": "aten::x", "pid": 1, "tid": 1,
                     "ts": 120, "dur": 5, **event}]  # fmt: skip


@pytest.mark.parametrize(
    "text",
    ['"ts": NaN', '"ts": Infinity', '"ts": -Infinity', '"pid": [1]', '"tid": {"a": 1}',
     '"args": {"stream": Infinity, "correlation": 1e400}', '"pid": 18446744073709551616'],
)  # fmt: skip
def test_odd_values_in_an_event_are_read_or_skipped_and_named(tmp_path, text):
    event = json.loads("{" + text.replace("NaN", "0").replace("-Infinity", "0").replace(
        "Infinity", "0").replace("1e400", "0") + "}")  # fmt: skip
    path = tmp_path / "t.json"
    doc = json.dumps({"traceEvents": _steps_and(event)})
    key = text.split(":")[0]
    value = text.split(":", 1)[1].strip()
    doc = doc.replace(f"{key}: {json.dumps(event[key.strip(chr(34))])}", f"{key}: {value}", 1)
    assert f"{key}: {value}" in doc
    path.write_text(doc)
    record = analyze_trace(str(path), jobs=1)  # no traceback: the analyses run on what was read
    t = load_trace(path)
    if "ts" in text:
        assert len(t) == 2 and any("a timestamp that is not finite" in n for n in t.notes)
    else:
        assert len(t) == 3 and record.trace.ranks[0].events == 3


@pytest.mark.parametrize("field", ["ts", "dur"])
def test_a_time_past_a_floats_range_is_a_clear_error(tmp_path, field):
    event = {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps({"traceEvents": [event]}).replace(f'"{field}": 1', f'"{field}": 1{"0" * 400}')
    )
    with pytest.raises(TraceFormatError, match="not a number a float can hold"):
        load_trace(path)
