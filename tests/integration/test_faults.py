"""Fault injection: bad inputs and bad paths, each run for real through the command line.

One row of :data:`CASES` is one fault: the command, the files it needs, and what must come out:
the exit status, a phrase of the message, the record where one is promised, and nothing else left
in the case's directory (no temp file, no probe, no record where none is promised, no sign that a
script ran when it must not have). Every case also gets the checks that make the error boundary:
no raw traceback, and "please report this" only with exit status 4.

A case runs in-process through :func:`torchdoctor.cli.main` unless it sets ``subprocess=True``
(a script that runs, a signal, an exit of the process itself). Process-death cases (SIGTERM,
``os._exit``, a closed pipe, ...) are rows too: ``during`` gets the running ``Popen`` to signal
or close, ``env`` sets the child's environment. A SIGTERM row would read::

    Case(
        "run-sigterm",
        ("run", *QUICK_RUN, "--json", "run.json", "train.py"),
        128 + signal.SIGTERM,
        "ended by SIGTERM",
        files={"train.py": SLOW_TRAIN},
        record="run.json",
        subprocess=True,
        during=lambda proc: (time.sleep(5), proc.send_signal(signal.SIGTERM)),
    )
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

import torchdoctor
from paths import TESTS
from torchdoctor._errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_OUT_OF_MEMORY,
    EXIT_SCRIPT_ERROR,
    EXIT_USAGE,
)
from torchdoctor.cli import main
from torchdoctor.record import RunRecord

pytestmark = pytest.mark.integration

SRC = Path(torchdoctor.__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Case:
    """One fault and what torchdoctor must do with it.

    Attributes:
        name: the test id.
        args: the command line after ``torchdoctor``; ``{tmp}`` stands for the case's directory.
        status: the exit status.
        message: a phrase of stderr + stdout (whitespace-insensitive: reports wrap lines).
        files: files made in the case's directory first, name -> text, bytes, or ``None`` for a
            directory. Only these, what ``setup`` makes, and what ``record`` and ``leaves`` name
            may be there after.
        record: where a record must exist after the run (relative to the case's directory).
        record_has: a phrase the record's JSON must hold.
        leaves: glob patterns of further files the command may leave (a trace directory's files).
        traceback: a traceback may be shown (the script's own, when the script raised; ours
            goes with status 4 only).
        cwd: where torchdoctor is started, relative to the case's directory.
        subprocess: run ``python -m torchdoctor`` in a child instead of :func:`main` in-process.
        env: extra environment of the child.
        during: called with the running child (send a signal, close its pipe); then it is waited.
        setup: called with the case's directory after ``files`` are made (permissions...).
        skip: a reason to skip this case here (decided when the table is built).
        timeout: seconds the child may take.
    """

    name: str
    args: tuple[str, ...]
    status: int
    message: str
    files: Mapping[str, str | bytes | None] = dataclasses.field(default_factory=dict)
    record: str | None = None
    record_has: str | None = None
    leaves: tuple[str, ...] = ()
    traceback: bool = False
    cwd: str = "."
    subprocess: bool = False
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    during: Callable[[subprocess.Popen], None] | None = None
    setup: Callable[[Path], None] | None = None
    skip: str | None = None
    timeout: float = 180.0


# --- inputs ------------------------------------------------------------------------------------

#: Not UTF-8 from the first byte (0x80 is a continuation byte), and no JSON either.
BINARY = bytes(range(128, 256)) * 4
DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_ARGS_TRACE = (
    '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": '
    + '{"a": ' * 5000
    + "1"
    + "}" * 5000
    + "}]}"
)
#: Two steps, one op with a negative duration and one step running backwards in time.
NEGATIVE_TRACE = json.dumps(
    {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": -50},
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 100, "dur": -9},
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 200, "dur": 100},
        ]
    }
)
GOOD_TRACE = json.dumps(
    {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 50},
        ]
    }
)

#: A script that would leave ``ran.txt`` behind: its absence proves a check came first.
MARKS_ITS_RUN = "open('ran.txt', 'w').write('the script ran')\n"
#: Fails on its imports, before any step: its own error, and no figure of a window never measured.
FAILS_AT_IMPORT = "import torch\nimport a_module_nobody_installed\n"

#: Trains a few steps after moving into ``elsewhere/``: relative outputs must not follow it.
CHDIR_TRAIN = """\
import os
import torch

os.makedirs("elsewhere", exist_ok=True)
os.chdir("elsewhere")
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(200):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""

#: Runs out of host memory in its third step: the CPU allocator refuses 1 PiB (nothing is
#: touched: the refusal is immediate).
RUNS_OUT_OF_MEMORY = """\
import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(200):
    if step == 2:
        features = torch.empty(2**50, dtype=torch.uint8)  # the batch that does not fit
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""

#: A torch op of the script's raises in its third step, when the sync finder watches its ops.
OP_FAILS = RUNS_OUT_OF_MEMORY.replace(
    "features = torch.empty(2**50, dtype=torch.uint8)  # the batch that does not fit",
    "features = torch.ones(3) @ torch.ones(4)  # shapes that do not match",
)

QUICK_RUN = ("--steps", "3", "--warmup", "1", "--no-counterfactuals", "--sync-steps", "0")
QUICK_RUN += ("--quiet",)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _read_only(name: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        (tmp / name).chmod(0o500)

    return setup


def _fifo(name: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        os.mkfifo(tmp / name)

    return setup


ROOT_SKIP = "root may write in a read-only directory" if _is_root() else None


# --- the table ---------------------------------------------------------------------------------

CASES: list[Case] = [
    # report: files that are not records
    Case(
        "report-binary",
        ("report", "r.json"),
        EXIT_USAGE,
        "r.json: not a text file",
        files={"r.json": BINARY},
    ),
    Case(
        "report-steps-is-a-number",
        ("report", "r.json"),
        EXIT_USAGE,
        "r.json: steps: expected an object, got 5",
        files={"r.json": '{"schema_version": 1, "steps": 5}'},
    ),
    Case(
        "report-wrong-type-deep-inside",
        ("report", "r.json"),
        EXIT_USAGE,
        'steps.step_ms[1]: expected a number, got "x"',
        files={"r.json": '{"schema_version": 2, "steps": {"step_ms": [1.5, "x"]}}'},
    ),
    Case(
        "report-unknown-finding-kind",
        ("report", "r.json"),
        EXIT_USAGE,
        "findings[0].kind: expected one of",
        files={
            "r.json": '{"schema_version": 2, "findings": [{"kind": "x", "title": "t", "fix": "f"}]}'
        },
    ),
    Case(
        "report-json-list",
        ("report", "r.json"),
        EXIT_USAGE,
        "the file holds a list, not a JSON object",
        files={"r.json": "[1, 2, 3]"},
    ),
    Case(
        "report-empty-object",
        ("report", "r.json"),
        EXIT_USAGE,
        "not a torchdoctor run record (no schema_version)",
        files={"r.json": "{}"},
    ),
    Case(
        "report-deep-nesting",
        ("report", "r.json"),
        EXIT_USAGE,
        "nested too deeply",
        files={"r.json": DEEP_JSON},
    ),
    Case(
        "report-a-trace",
        ("report", "t.json"),
        EXIT_USAGE,
        "no schema_version",
        files={"t.json": GOOD_TRACE},
    ),
    Case(
        # The loader checks types, not values: a NaN or a 1e300 ms step is a float, and an
        # impossible one: refused with what is wrong, as compare refuses it.
        "report-impossible-value",
        ("report", "r.json"),
        EXIT_USAGE,
        "r.json: the record has impossible step times (nan ms among 1 of 1)",
        files={
            "r.json": '{"schema_version": 2, "steps": {"step_ms": [NaN], "forward_ms": [1.0]}, '
            '"parts_ms": {"forward": {"median": 1, "p90": 1, "mean": 1, "min": 1, "max": 1, '
            '"count": 1}}}'
        },
    ),
    Case(
        "report-a-step-of-1e300-ms",
        ("report", "r.json"),
        EXIT_USAGE,
        "r.json: the record has impossible step times (1e+300 ms among 2 of 2)",
        files={"r.json": '{"schema_version": 2, "steps": {"step_ms": [1e300, 1e300]}}'},
    ),
    Case("report-missing", ("report", "nope.json"), EXIT_USAGE, "nope.json: no such file"),
    Case(
        "report-directory",
        ("report", "d"),
        EXIT_USAGE,
        "d: cannot read",
        files={"d": None},
    ),
    # analyze: files that are not traces, and traces with bad events
    Case(
        "analyze-json-list",
        ("analyze", "t.json"),
        EXIT_USAGE,
        "not a profiler trace: its event array holds 3 value(s), none an event object",
        files={"t.json": "[1, 2, 3]"},
    ),
    Case(
        "analyze-empty-list",
        ("analyze", "t.json"),
        EXIT_USAGE,
        "not a profiler trace: the file is an empty JSON array",
        files={"t.json": "[]"},
    ),
    Case(
        "analyze-empty-object",
        ("analyze", "t.json"),
        EXIT_USAGE,
        "not a Kineto trace (no traceEvents)",
        files={"t.json": "{}"},
    ),
    Case(
        "analyze-a-run-record",
        ("analyze", "r.json"),
        EXIT_USAGE,
        "no traceEvents",
        files={"r.json": '{"schema_version": 2, "steps": {"step_ms": [1.0]}}'},
    ),
    Case(
        "analyze-deeply-nested-args",
        ("analyze", "t.json"),
        EXIT_USAGE,
        "nested too deeply to be a profiler event",
        files={"t.json": DEEP_ARGS_TRACE},
    ),
    Case(
        "analyze-binary",
        ("analyze", "t.json"),
        EXIT_USAGE,
        "binary data (not UTF-8 JSON text)",
        files={"t.json": BINARY},
    ),
    Case(
        "analyze-negative-durations-skipped-and-named",
        ("analyze", "t.json", "--json", "out.json"),
        EXIT_OK,
        "skipped 2 event(s) with a negative or non-finite duration",
        files={"t.json": NEGATIVE_TRACE},
        record="out.json",
        record_has="#2 'ProfilerStep#2' (-9 us)",
    ),
    Case(
        "analyze-json-to-a-directory",
        ("analyze", "t.json", "--json", "out"),
        EXIT_USAGE,
        "--json out: names a directory; --json takes a file name",
        files={"t.json": GOOD_TRACE, "out": None},
    ),
    # cache build: destinations that cannot be a cache directory
    Case(
        "cache-dest-in-proc",
        ("cache", "build", "cache_sources:mixed", "/proc/torchdoctor-faults/cache", "--quiet"),
        EXIT_USAGE,
        "DEST /proc/torchdoctor-faults/cache: cannot write in /proc",
        skip=None if Path("/proc").is_dir() else "no /proc here",
    ),
    Case(
        "cache-dest-under-a-file",
        ("cache", "build", "cache_sources:mixed", "f/cache", "--quiet"),
        EXIT_USAGE,
        "is a file, so nothing can be made under it",
        files={"f": "a regular file"},
    ),
    Case(
        "cache-dest-is-a-file",
        ("cache", "build", "cache_sources:mixed", "f", "--quiet"),
        EXIT_USAGE,
        "DEST f: is a file; DEST takes a directory",
        files={"f": "a regular file"},
    ),
    Case(
        "cache-dest-read-only",
        ("cache", "build", "cache_sources:mixed", "ro/cache", "--quiet"),
        EXIT_USAGE,
        "cannot write in",
        files={"ro": None},
        setup=_read_only("ro"),
        skip=ROOT_SKIP,
    ),
    # run: output paths checked before the script runs (ran.txt would show that it ran)
    Case(
        "run-json-is-a-directory",
        ("run", "--json", "out", "train.py"),
        EXIT_USAGE,
        "--json out: names a directory; --json takes a file name",
        files={"train.py": MARKS_ITS_RUN, "out": None},
    ),
    Case(
        "run-html-to-stdout",  # it wrote a file named "-"
        ("run", "--html", "-", "train.py"),
        EXIT_USAGE,
        "--html -: only --json takes '-' (standard output)",
        files={"train.py": MARKS_ITS_RUN},
    ),
    Case(
        "fix-apply-within-without-apply",
        ("fix", "--apply-within", ".", "train.py"),
        EXIT_USAGE,
        "--apply-within limits --apply",
        files={"train.py": MARKS_ITS_RUN},
    ),
    Case(
        "fix-apply-within-a-file",
        ("fix", "--apply", "--apply-within", "f", "train.py"),
        EXIT_USAGE,
        "--apply-within f: not a folder",
        files={"train.py": MARKS_ITS_RUN, "f": "a regular file"},
    ),
    Case(
        "mcp-root-not-a-folder",
        ("mcp", "--root", "nowhere"),
        EXIT_USAGE,
        "--root nowhere: not a folder",
    ),
    Case(
        "run-json-ends-with-a-slash",
        ("run", "--json", "new/", "train.py"),
        EXIT_USAGE,
        "--json new/: names a directory; --json takes a file name",
        files={"train.py": MARKS_ITS_RUN},
    ),
    Case(
        "run-json-under-a-file",
        ("run", "--json", "f/run.json", "train.py"),
        EXIT_USAGE,
        "is a file, so nothing can be made under it",
        files={"train.py": MARKS_ITS_RUN, "f": "a regular file"},
    ),
    Case(
        "run-json-in-proc",
        ("run", "--json", "/proc/torchdoctor-faults/run.json", "train.py"),
        EXIT_USAGE,
        "cannot write in /proc",
        files={"train.py": MARKS_ITS_RUN},
        skip=None if Path("/proc").is_dir() else "no /proc here",
    ),
    Case(
        "run-json-read-only-dir",
        ("run", "--json", "ro/run.json", "train.py"),
        EXIT_USAGE,
        "--json ro/run.json: cannot write in",
        files={"train.py": MARKS_ITS_RUN, "ro": None},
        setup=_read_only("ro"),
        skip=ROOT_SKIP,
    ),
    Case(
        # A pipe, not /dev/null: were the check ever lost, the record's rename would replace
        # the node it names, and that must never be a system file.
        "run-json-a-pipe",
        ("run", "--json", "pipe", "train.py"),
        EXIT_USAGE,
        "--json pipe: is not a regular file",
        files={"train.py": MARKS_ITS_RUN},
        setup=_fifo("pipe"),
        skip=None if hasattr(os, "mkfifo") else "no named pipes here",
    ),
    Case(
        "run-trace-is-a-file",
        ("run", "--trace", "f", "train.py"),
        EXIT_USAGE,
        "--trace f: is a file; --trace takes a directory",
        files={"train.py": MARKS_ITS_RUN, "f": "a regular file"},
    ),
    Case(
        "run-trace-in-proc",
        ("run", "--trace", "/proc/torchdoctor-faults/tr", "train.py"),
        EXIT_USAGE,
        "--trace /proc/torchdoctor-faults/tr: cannot write in /proc",
        files={"train.py": MARKS_ITS_RUN},
        skip=None if Path("/proc").is_dir() else "no /proc here",
    ),
    # run: a script that fails before any step has its own error said, and no CPU shares (its
    # sampler never started: they read the machine's load since boot)
    Case(
        "run-script-fails-at-import",
        ("run", *QUICK_RUN, "--json", "run.json", "train.py"),
        EXIT_SCRIPT_ERROR,
        "ModuleNotFoundError",
        files={"train.py": FAILS_AT_IMPORT},
        record="run.json",
        record_has='"cpu_percent_per_core": [],',
        traceback=True,
        subprocess=True,
    ),
    # run: out of memory is its own ending, with the line that asked and the size, and its own
    # exit status (issue "Memory joined with speed", item 4)
    Case(
        "run-script-runs-out-of-memory",
        ("run", *QUICK_RUN, "--json", "run.json", "train.py"),
        EXIT_OUT_OF_MEMORY,
        "OUT OF MEMORY the script ran out of host memory at",
        files={"train.py": RUNS_OUT_OF_MEMORY},
        record="run.json",
        record_has='"status": "out-of-memory"',
        traceback=True,
        subprocess=True,
    ),
    # run: an op of the script's that raises while the sync finder watches the ops is the
    # script's error, never torchdoctor's ("please report"): the watcher's mode made the call
    Case(
        "run-script-op-fails-under-the-sync-watch",
        (
            "run",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--no-counterfactuals",
            "--quiet",
            "--json",
            "run.json",
            "train.py",
        ),
        EXIT_SCRIPT_ERROR,
        "the script failed",
        files={"train.py": OP_FAILS},
        record="run.json",
        record_has='"status": "script-error"',
        traceback=True,
        subprocess=True,
    ),  # fmt: skip
    # run: relative outputs stay where torchdoctor was started when the script chdirs
    Case(
        "run-relative-json-and-trace-with-chdir",
        ("run", *QUICK_RUN, "--json", "rec/run.json", "--trace", "tr", "train.py"),
        EXIT_OK,
        "run record written to",
        files={"train.py": CHDIR_TRAIN},
        record="rec/run.json",
        record_has='"status": "complete"',
        leaves=("tr/*", "elsewhere"),
        subprocess=True,
    ),
]


# --- running a case ------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    status: int
    output: str


def _make_files(root: Path, files: Mapping[str, str | bytes | None]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir(exist_ok=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _args(case: Case, root: Path) -> list[str]:
    return [a.replace("{tmp}", str(root)) for a in case.args]


def _run_in_process(case: Case, root: Path, capsys, monkeypatch) -> Outcome:
    monkeypatch.chdir(root / case.cwd)
    monkeypatch.setenv("COLUMNS", "400")
    try:
        status = main(_args(case, root))
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code if isinstance(exc.code, int) else EXIT_USAGE
    captured = capsys.readouterr()
    return Outcome(status, captured.err + captured.out)


def _run_child(case: Case, root: Path) -> Outcome:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]),
        "COLUMNS": "400",
        **case.env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchdoctor", *_args(case, root)],
        cwd=root / case.cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        if case.during is not None:
            case.during(proc)
        output, _ = proc.communicate(timeout=case.timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return Outcome(proc.returncode, output)


def _files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def _allowed(case: Case, root: Path, before: set[str]) -> set[str]:
    """What may be in the case's directory after the run: what was there, the promised record,
    and what ``leaves`` matches (with the folders that hold them)."""
    allowed = set(before)
    if case.record:
        allowed |= {case.record, *(p.as_posix() for p in Path(case.record).parents)}
    for pattern in case.leaves:
        allowed |= {p.relative_to(root).as_posix() for p in root.glob(pattern)}
        allowed |= {p.as_posix() for p in Path(pattern).parents}
    return allowed - {"."}


def _squash(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fault(case: Case, tmp_path, capsys, monkeypatch):
    if case.skip:
        pytest.skip(case.skip)
    root = tmp_path / "case"
    root.mkdir()
    _make_files(root, case.files)
    if case.setup is not None:
        case.setup(root)
    before = _files_under(root)
    try:
        if case.subprocess:
            outcome = _run_child(case, root)
        else:
            outcome = _run_in_process(case, root, capsys, monkeypatch)
    finally:
        for path in [root, *root.rglob("*")]:  # undo a setup's chmod so tmp_path can be removed
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)

    shown = f"exit {outcome.status}; output:\n{outcome.output[-3000:]}"
    assert outcome.status == case.status, shown
    assert _squash(case.message) in _squash(outcome.output), shown
    if not case.traceback and outcome.status != EXIT_INTERNAL:
        assert "Traceback (most recent call last)" not in outcome.output, shown
    if outcome.status != EXIT_INTERNAL:
        assert "please report" not in outcome.output.lower(), shown
    if case.record is not None:
        record_path = root / case.record
        assert record_path.is_file(), f"no record at {case.record}; {shown}"
        RunRecord.load(record_path)  # it is a whole, readable record
        if case.record_has is not None:
            assert case.record_has in record_path.read_text()
    left = _files_under(root) - _allowed(case, root, before)
    assert not left, f"left behind: {sorted(left)}; {shown}"


def test_every_case_has_a_unique_name_and_a_real_expectation():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    for case in CASES:
        assert case.message.strip(), case.name
        assert case.record_has is None or case.record is not None, case.name


def test_the_probe_of_a_writable_place_leaves_nothing(tmp_path):
    from torchdoctor._paths import check_output_dir, check_output_file

    assert check_output_file(tmp_path / "a" / "b.json", "--json") == str(tmp_path / "a" / "b.json")
    assert check_output_dir(tmp_path / "new", "--trace") == str(tmp_path / "new")
    assert list(tmp_path.iterdir()) == []


def test_relative_paths_are_made_absolute_from_the_start_directory(tmp_path, monkeypatch):
    from torchdoctor._paths import check_output_file

    monkeypatch.chdir(tmp_path)
    assert check_output_file("r.json", "--json") == str(tmp_path / "r.json")


def test_a_refused_probe_names_the_directory_and_the_reason(tmp_path, monkeypatch):
    """What the read-only rows check, also where they are skipped (root writes anywhere)."""
    from torchdoctor import _paths

    def refuse(**_kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_paths.tempfile, "mkstemp", refuse)
    with pytest.raises(_paths.OutputPathError) as err:
        _paths.check_output_file(tmp_path / "sub" / "run.json", "--json")
    assert f"cannot write in {tmp_path} (Permission denied)" in err.value.message
    assert err.value.exit_status == EXIT_USAGE


def test_a_bug_of_ours_is_status_4_with_its_traceback_and_please_report(monkeypatch, capsys):
    """The one place "please report" belongs: an exception that is no TorchdoctorError."""
    import torchdoctor.cli.report as report

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(report, "_cmd_report", broken)
    assert main(["report", "anything.json"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "RuntimeError: a bug" in err and "Traceback (most recent call last)" in err
    assert "torchdoctor itself failed" in err and "please report" in err


def test_mcp_without_the_sdk_names_the_install_that_brings_it(tmp_path, monkeypatch, capsys):
    from torchdoctor.cli import main

    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp raises ImportError
    assert main(["mcp", "--root", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "torchdoctor mcp needs the package 'mcp'" in err
    assert "fix: pip install 'torchdoctor[mcp]'" in err and "Traceback" not in err
