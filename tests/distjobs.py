"""Distributed jobs run as a user runs them (``torchdoctor run --nproc-per-node 2``) on
``tests/scenarios/ddp_train.py``, their record read back, and no process of theirs left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

import torchdoctor
from paths import SCENARIOS

JOB = str(SCENARIOS / "ddp_train.py")
SRC = str(Path(torchdoctor.__file__).resolve().parent.parent)
#: Enough steps for a mean, few enough for two ranks on two cores.
QUICK = ("--steps", "6", "--warmup", "2")
#: A rank's samples this slow make it the straggler beyond any doubt (8 samples per batch).
SLOW_SAMPLE_MS = "20"


def torchdoctor_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "torchdoctor", *args]


def run(cmd: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def job(tmp: Path, *job_args: str, flags: tuple[str, ...] = QUICK):
    """``torchdoctor run --nproc-per-node 2 FLAGS --json r.json -- ddp_train.py JOB_ARGS``:
    its output, its record (``None`` if none was written), and the tag its processes carry."""
    tag = uuid.uuid4().hex
    res = run(
        torchdoctor_cmd("run", "--nproc-per-node", "2", *flags, "--json", "r.json", "--",
                        JOB, *job_args, "--tag", tag),
        tmp,
    )  # fmt: skip
    path = tmp / "r.json"
    return res, json.loads(path.read_text()) if path.exists() else None, tag


def tagged(tag: str) -> list[int]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if tag in " ".join(p.info["cmdline"] or []):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def assert_no_orphans(tag: str) -> None:
    deadline = time.monotonic() + 5.0
    while tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tagged(tag), "processes of the job outlived torchdoctor"


def wait_for_phase(proc: subprocess.Popen, phase: str, timeout: float = 120) -> None:
    """Read the progress lines on stderr until ``phase`` starts."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if phase in line:
            return
    raise AssertionError(f"the job never reached the {phase} phase")


def env_with_src() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def default_sigint() -> None:
    """In a child: SIGINT's default action (a suite run as a background job ignores it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
