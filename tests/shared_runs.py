"""Scenario runs that tests in several files read, each run once per session (issue 38: a suite
that stays fast). A fixture here runs ``torchdoctor run`` to its end inside its own setup, so
nothing of the run outlives it (the hygiene fixture's rules hold), and hands every test that asks
the command's output and the record; each test asserts its own things on the one run.

A run here carries the flags of every test that reads it: a test that needs a flag the others do
not mind adds it here, not a second run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from paths import SCENARIOS

#: A comment in latin-1 bytes (UTF-8 cannot decode them) just above the option whose default the
#: fix edits (the DataLoader's ``num_workers=args.workers``), so the diff's context carries it.
LATIN1_COMMENT = "# le chargeur: données décodées à la volée\n"
#: The input-bound scenario `fix` has a measured remedy for (workers and threads).
SLOW_TRANSFORM_ARGS = ["--transform-ms", "12", "--dataset-len", "96"]


def torchdoctor(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m torchdoctor ARGS`` in ``cwd``, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "torchdoctor", *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@dataclass(frozen=True)
class SharedRun:
    """A finished ``torchdoctor run``: the script it ran, its output and its record."""

    script: Path
    done: subprocess.CompletedProcess
    record_path: Path

    @property
    def record(self) -> dict:
        """The record's JSON (a fresh copy: a test may change it)."""
        return json.loads(self.record_path.read_text())

    @property
    def said(self) -> str:
        """The report on stdout with its lines joined (the terminal wraps long lines)."""
        return " ".join(self.done.stdout.split())


def _run(folder: Path, script: Path, flags: list[str], args: list[str], **env: str) -> SharedRun:
    record = folder / "run.json"
    command = [sys.executable, "-m", "torchdoctor", "run", *flags, "--json", str(record)]
    done = subprocess.run(
        [*command, "--", str(script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
        env={**os.environ, **env},
    )
    return SharedRun(script, done, record)


@pytest.fixture(scope="session")
def hf_trainer_run(tmp_path_factory) -> SharedRun:
    """A Hugging Face Trainer run (tests/scenarios/hf_trainer.py): its loader's batch size from
    the Trainer's batch sampler (test_loader_batch_size) and the syncs of the Trainer's own lines
    (test_syncs_scenarios). One sampled step is enough for a per-step count; no counterfactual
    is read by either."""
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (pip install -e '.[dev]' brings it)")
    return _run(
        tmp_path_factory.mktemp("hf_trainer"),
        SCENARIOS / "hf_trainer.py",
        ["--warmup", "1", "--steps", "3", "--sync-steps", "1", "--no-counterfactuals"],
        ["--batch-size", "4"],
    )


@pytest.fixture(scope="session")
def lightning_loop_run(tmp_path_factory) -> SharedRun:
    """A PyTorch Lightning Trainer run (tests/scenarios/lightning_loop.py) with slow samples and
    the loss in the progress bar: its verdict and parts (test_run) and the sync of Lightning's
    progress bar (test_syncs_lightning)."""
    if not any(importlib.util.find_spec(m) for m in ("lightning", "pytorch_lightning")):
        pytest.skip("PyTorch Lightning is not installed")
    return _run(
        tmp_path_factory.mktemp("lightning_loop"),
        SCENARIOS / "lightning_loop.py",
        ["--steps", "5", "--warmup", "2"],
        ["--getitem-ms", "15", "--prog-bar"],
        PL_DISABLE_FORK="1",
    )


def crlf_latin1_script(folder: Path) -> bytes:
    """tests/scenarios/train_loop.py as an editor on Windows or an old project leaves it: CRLF line
    endings and a latin-1 coding cookie (PEP 263), a latin-1 comment above the workers option."""
    text = (SCENARIOS / "train_loop.py").read_text()
    option = 'parser.add_argument("--workers"'
    text = "# -*- coding: latin-1 -*-\n" + text.replace(option, LATIN1_COMMENT + option, 1)
    data = text.replace("\n", "\r\n").encode("latin-1")
    (folder / "train.py").write_bytes(data)
    return data


@dataclass(frozen=True)
class AppliedFix:
    """``torchdoctor fix --apply`` on the CRLF, latin-1 script, then the applied script run."""

    project: Path
    original: bytes
    fix: subprocess.CompletedProcess
    after: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def applied_fix(tmp_path_factory) -> AppliedFix:
    """One ``fix --apply`` of the input-bound scenario, in a file with CRLF line endings and a
    latin-1 cookie: the bytes kept (test_fix_file_bytes), the backup, the diff and the applied
    script's speed (test_fix_command). The same command on an LF file, through
    ``--apply-within``, is the agents' loop (test_mcp)."""
    project = tmp_path_factory.mktemp("applied") / "project"
    project.mkdir()
    original = crlf_latin1_script(project)

    fix = torchdoctor(
        "fix", "--steps", "6", "--warmup", "2", "--quiet", "--json", "fix.json", "--apply",
        "--", "train.py", *SLOW_TRANSFORM_ARGS,
        cwd=project,
    )  # fmt: skip
    after = torchdoctor(
        "run", "--steps", "8", "--warmup", "4", "--quiet", "--no-counterfactuals",
        "--json", "after.json", "--", "train.py", *SLOW_TRANSFORM_ARGS,
        cwd=project,
    )  # fmt: skip
    return AppliedFix(project, original, fix, after)
