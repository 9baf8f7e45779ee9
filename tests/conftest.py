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

from hog import start_hog, stop_hog  # noqa: E402
from hygiene import snapshot, wait_for_children, warm_up_torch  # noqa: E402

warm_up_torch()

#: Session fixtures of the scenario runs that tests in several files share.
pytest_plugins = ["shared_runs"]


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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-hog",
        action="store_true",
        help="run every test beside a process that busy-loops on one core (a loaded machine): "
        "the timing-marked tests must still pass (`make test-load`)",
    )


@pytest.fixture(scope="session", autouse=True)
def cpu_hog(request: pytest.FixtureRequest):
    """With ``--cpu-hog``: a busy-looping process for the whole session, no child of this one
    (the capture counts the script's children as its own)."""
    if not request.config.getoption("--cpu-hog"):
        yield None
        return
    pid = start_hog()
    try:
        yield pid
    finally:
        stop_hog(pid)


@pytest.fixture
def scenarios_dir() -> Path:
    return HERE / "scenarios"
