"""Shared fixtures. The hygiene fixture runs for every test: patching torch is our biggest risk."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
# Scenario modules (slow_transform, ...) are imported by unit tests and benchmarks alike.
sys.path.insert(1, str(HERE / "scenarios"))

from hygiene import snapshot, wait_for_children, warm_up_torch  # noqa: E402

warm_up_torch()


@pytest.fixture(autouse=True)
def torch_left_unpatched():
    """Fail any test that leaves torch patched, a hook installed, a thread or a process behind."""
    before = snapshot()
    threads_before = {t.ident for t in threading.enumerate()}
    yield
    after = snapshot()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"test left torch changed: {changed[:20]}"
    leftover = [
        t.name
        for t in threading.enumerate()
        if t.ident not in threads_before and t.is_alive() and not t.daemon
    ]
    leftover += [
        t.name
        for t in threading.enumerate()
        if t.ident not in threads_before and t.is_alive() and t.name.startswith("torchdoctor")
    ]
    assert not leftover, f"test left threads running: {leftover}"
    children = wait_for_children(psutil.Process(), timeout_s=10.0)
    assert not children, f"test left child processes: {children}"


@pytest.fixture
def scenarios_dir() -> Path:
    return HERE / "scenarios"
