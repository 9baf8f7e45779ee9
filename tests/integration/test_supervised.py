"""Whatever ends the script's process, ``torchdoctor run`` keeps the record and says how it ended.

Each case runs the real command (``python -m torchdoctor run``) on a script from
``tests/scenarios/faults/``, then checks the exit status, the record's status and notes, that the
record exists where ``--json`` promised, and that the script's process is gone. New failures found
in the field become new rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import psutil
import pytest

from paths import SCENARIOS
from torchdoctor._errors import EXIT_TIMED_OUT

FAULTS = SCENARIOS / "faults"
pytestmark = pytest.mark.integration


@dataclass
class Case:
    name: str
    script: str
    flags: list[str]
    exit_status: int
    status: str
    note: str
    measured_at_least: int = 0
    env: dict[str, str] = field(default_factory=dict)
    #: The script's own arguments.
    args: list[str] = field(default_factory=list)
    #: ``run --try`` levers the record must still hold.
    trials_at_least: int = 0


CASES = [
    # Every step measured before the end is kept (the step log): 13 steps, 1 warmup, 2 watched.
    Case("os._exit", "os_exit.py", [], 1, "killed", "ended with status 0 without", 10),
    Case("SIGKILL", "sigkill_self.py", [], 1, "killed", "killed by SIGKILL", 13),
    Case(
        # 1 warmup + 2 sync + 20 measured + 1 FLOPs step, then a baseline (10) and foreach (22):
        # killed in the next baseline, the foreach trial already measured.
        "SIGKILL during the trials",
        "sigkill_self.py",
        ["--try", "foreach", "--no-counterfactuals"],
        1,
        "killed",
        "killed by SIGKILL",
        20,
        env={"KILL_AT": "60"},
        trials_at_least=1,
    ),
    Case(
        "never steps",
        "never_steps.py",
        ["--max-seconds", "6"],
        5,
        "timed-out",
        "--max-seconds bound (6 s)",
    ),
    Case(
        "swallows the stop",
        "swallows_stop.py",
        ["--no-counterfactuals"],
        0,
        "complete",
        "caught torchdoctor's stop",
        5,
    ),
    Case("sys.exit(3)", "sys_exit.py", [], 1, "script-error", "exited with status 3 (sys.exit)"),
    Case(
        "the script's argparse error",
        "needs_args.py",
        [],
        1,
        "script-error",
        "exited with status 2 (sys.exit) after 0 measured steps",
    ),
    Case(
        "the script's --help",
        "needs_args.py",
        [],
        3,
        "no-training",
        "exited with status 0 without a training step",
        args=["--help"],
    ),
    Case(
        # 1 warmup + 2 watched for syncs + 9 measured, then a sleep: where it was is kept.
        "stalls until the bound",
        "stalls.py",
        ["--max-seconds", "12"],
        5,
        "timed-out",
        "stalls.py:11 in <module> (time.sleep(3600))",
        9,
    ),
    Case(
        "bound stops the script's own forked helper",
        "forks_helper.py",
        ["--max-seconds", "4"],
        5,
        "timed-out",
        "--max-seconds bound (4 s)",
    ),
    Case(
        "ascii terminal",
        "os_exit.py",
        [],
        1,
        "killed",
        "ended with status 0",
        3,
        env={"PYTHONIOENCODING": "ascii"},
    ),
]


def _run(tmp_path, case: Case, **popen):
    record = tmp_path / "out" / "run.json"
    pidfile = tmp_path / "script.pid"
    env = {**os.environ, "TORCHDOCTOR_TEST_PIDFILE": str(pidfile), **case.env}
    cmd = [sys.executable, "-m", "torchdoctor", "run", "--steps", "20", "--warmup", "1"]
    cmd += [*case.flags, "--json", str(record), "--timeline", str(record.with_suffix(".trace"))]
    cmd += ["--", str(FAULTS / case.script), *case.args]
    return cmd, env, record, pidfile


def _script_gone(pidfile) -> bool:
    if not pidfile.exists():  # the script ended before its loop began
        return True
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return not psutil.pid_exists(pid)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_record_survives(tmp_path, case):
    cmd, env, record, pidfile = _run(tmp_path, case)
    started = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if "--max-seconds" in case.flags:  # the bound holds: no more than the grace and start-up
        bound = float(case.flags[case.flags.index("--max-seconds") + 1])
        assert time.monotonic() - started < bound + 10
    assert done.returncode == case.exit_status, done.stdout + done.stderr
    data = json.loads(record.read_text())
    assert data["status"] == case.status
    assert not case.note or any(case.note in n for n in data["notes"]), data["notes"]
    assert len(data["steps"]["step_ms"]) >= case.measured_at_least
    assert len([t for t in data["trials"] if t["status"] == "measured"]) >= case.trials_at_least
    assert "Traceback" not in done.stderr
    assert _script_gone(pidfile)
    _timeline_holds_the_record(record, data, done.stdout)


def test_a_run_cut_at_the_bound_after_a_step_is_told_to_raise_the_bound(tmp_path):
    """Its verdict on too few steps reads the status the bound gave it (it was derived from the
    last snapshot's, and said to give the run more data or epochs)."""
    # 1 warmup + 2 watched for syncs + 1 or 2 measured, then the stall
    case = Case("stalls after a step", "stalls.py", ["--max-seconds", "15"], 5, "timed-out", "")
    cmd, env, record, _ = _run(tmp_path, case)
    done = subprocess.run(cmd, env={**env, "STALL_AT": "4"}, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == EXIT_TIMED_OUT, done.stdout + done.stderr
    data = json.loads(record.read_text())
    assert data["status"] == "timed-out" and 0 < len(data["steps"]["step_ms"]) < 3, data["notes"]
    assert data["verdict"]["next"].startswith("raise --max-seconds"), data["verdict"]


def _timeline_holds_the_record(record, data: dict, stdout: str) -> None:
    """The --timeline is written on every ending, with the record's measured steps, and the
    report says where it went."""
    timeline = record.with_suffix(".trace")
    assert timeline.exists(), data["notes"]
    events = json.loads(timeline.read_text())["traceEvents"]
    measured = [e for e in events if e.get("cat") == "step" and e["name"].startswith("measure ")]
    assert len(measured) == len(data["steps"]["step_ms"]), (len(measured), data["notes"])
    assert f"timeline written to {timeline}" in " ".join(stdout.split())


def _measuring(cmd, env, pidfile) -> subprocess.Popen:
    """``cmd`` started, once its script's loop has begun and 3 s more (into the measured steps
    of a script that steps every 0.2 s)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3.0)
    return proc


def test_sigterm_to_torchdoctor_keeps_the_record(tmp_path):
    case = Case("sigterm", "slow_steps.py", [], 130, "interrupted", "received SIGTERM")
    cmd, env, record, pidfile = _run(tmp_path, case)
    proc = _measuring(cmd, env, pidfile)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == case.exit_status, (out + err).decode(errors="replace")
    data = json.loads(record.read_text())
    assert data["status"] == "interrupted"
    assert any(case.note in n for n in data["notes"]), data["notes"]
    assert _script_gone(pidfile)
    _timeline_holds_the_record(record, data, out.decode(errors="replace"))


def test_a_script_that_ignores_ctrl_c_is_stopped_after_the_grace(tmp_path):
    """The first Ctrl-C is handed to the script; one that ignores it (or swallows it, or hangs
    ending) was waited for until --max-seconds (900 s by default): in CI a run handed Ctrl-C
    once outlived its test's 60 s. Now it is stopped INTERRUPT_GRACE_S later, and says so."""
    from torchdoctor.process._processes import INTERRUPT_GRACE_S, TERMINATE_GRACE_S

    case = Case("ignores Ctrl-C", "ignores_ctrl_c.py", ["--steps", "1000"], 130, "interrupted", "")
    cmd, env, record, pidfile = _run(tmp_path, case)
    proc = _measuring(cmd, env, pidfile)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=INTERRUPT_GRACE_S + TERMINATE_GRACE_S + 60)
    took = time.monotonic() - sent
    assert proc.returncode == case.exit_status, (out + err).decode(errors="replace")
    assert INTERRUPT_GRACE_S <= took, took  # the script had its grace
    data = json.loads(record.read_text())
    assert data["status"] == "interrupted" and len(data["steps"]["step_ms"]) > 0, data["notes"]
    words = f"handed it to the script, which had not ended {INTERRUPT_GRACE_S:g} s later"
    assert any(words in n for n in data["notes"]), data["notes"]
    assert _script_gone(pidfile)
    _timeline_holds_the_record(record, data, out.decode(errors="replace"))


def test_a_closed_pipe_loses_the_text_not_the_record(tmp_path):
    case = Case(
        "head", "slow_steps.py", ["--steps", "3", "--no-counterfactuals"], 0, "complete", ""
    )
    cmd, env, record, pidfile = _run(tmp_path, case)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()  # like `| head -1`: read a line, then close the pipe
    proc.stdout.close()
    err = proc.stderr.read().decode(errors="replace")
    proc.wait(timeout=120)
    assert proc.returncode == 0, err  # the run's own status, not the pipe's
    assert "BrokenPipe" not in err and "Traceback" not in err
    assert json.loads(record.read_text())["status"] == "complete"
    assert _script_gone(pidfile)


def test_a_module_is_found_from_the_current_folder_like_python_m(tmp_path):
    """``torchdoctor run -m mod`` finds ``mod`` in the folder it is started from, as
    ``python -m mod`` does, also through the ``torchdoctor`` console script (whose own folder,
    not the current one, heads its ``sys.path``)."""
    console = os.path.join(os.path.dirname(sys.executable), "torchdoctor")
    if not os.path.exists(console):
        pytest.skip("no torchdoctor console script beside this Python")
    (tmp_path / "mytrain.py").write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(200):\n"
        "    model(torch.randn(8, 4)).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
    )
    done = subprocess.run(
        [console, "run", "--quiet", "--steps", "3", "--warmup", "1", "--json", "r.json"]
        + ["--no-counterfactuals", "-m", "mytrain"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "complete"


def test_a_script_named_torchdoctor_py_runs_as_the_script(tmp_path):
    """The script's process must import torchdoctor, not a ``torchdoctor.py`` in the folder it is
    started from (``python -m`` would put that folder first on ``sys.path``)."""
    console = os.path.join(os.path.dirname(sys.executable), "torchdoctor")
    if not os.path.exists(console):
        pytest.skip("no torchdoctor console script beside this Python")
    shadow = FAULTS / "shadow"
    record = tmp_path / "r.json"
    done = subprocess.run(
        [console, "run", "--quiet", "--steps", "3", "--warmup", "1", "--no-counterfactuals"]
        + ["--json", str(record), "torchdoctor.py"],
        cwd=shadow,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(record.read_text())["status"] == "complete"
