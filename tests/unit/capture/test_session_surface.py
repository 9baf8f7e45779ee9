"""The capture session's typed surface: the hooks use only what ``StepHooks`` declares, phases only
what ``PhaseSession`` declares, a phase sets only what it lends and writes only the
``session.data`` fields it names, and a phase that reads an earlier one's result runs after it.

Each rule is checked on the source of the phases and hooks, and each checker is first shown a
snippet that breaks its rule (so the check itself can fail)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from torchdoctor.capture import CaptureSession
from torchdoctor.capture._step_hooks import StepHooks
from torchdoctor.capture.phases import PHASES, WHOLE_PHASES
from torchdoctor.capture.phases.base import LENT, Phase, PhaseSession
from torchdoctor.options import RunOptions

#: Methods of the session a phase calls that read an earlier phase's result.
_METHOD_READS = {
    "measured_series": "measured",
    "measured_batches_per_step": "measured",
    "model_alone_step_ms": "model_alone",
}
#: Fields of ``session.data`` every phase may add to or read (kept by the session itself).
_SHARED = {"notes", "seen"}
_MUTATORS = {"append", "extend", "update", "clear", "insert", "pop", "setdefault"}


def _undeclared_self(cls_source: str) -> set[str]:
    """Members a class's methods use on ``self`` that its body neither defines nor annotates."""
    cls = next(n for n in ast.parse(cls_source).body if isinstance(n, ast.ClassDef))
    declared = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.Assign):
            declared |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    used = {
        n.attr
        for n in ast.walk(cls)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }
    return used - declared


def _session_attr(node: ast.AST) -> str | None:
    """``X`` for ``session.X``."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "session"
    ):
        return node.attr
    return None


def _data_field(node: ast.AST) -> str | None:
    """``X`` for ``session.data.X``."""
    if isinstance(node, ast.Attribute) and _session_attr(node.value) == "data":
        return node.attr
    return None


def _uses(source: str) -> dict[str, set[str]]:
    """What a phase module does with the session: members used and set, data written and read."""
    tree = ast.parse(source)
    found: dict[str, set[str]] = {"used": set(), "set": set(), "writes": set(), "reads": set()}
    writes: set[int] = set()  # ids of the session.data.X nodes that write
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AugAssign | ast.AnnAssign)
            else []
        )
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if (name := _session_attr(t)) is not None:
                    found["set"].add(name)
                if _data_field(t) is not None:
                    writes.add(id(t))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS
            and _data_field(node.func.value) is not None
        ):
            writes.add(id(node.func.value))
    for node in ast.walk(tree):
        if (name := _session_attr(node)) is not None:
            found["used"].add(name)
            if name in _METHOD_READS:
                found["reads"].add(_METHOD_READS[name])
        if (field := _data_field(node)) is not None:
            found["writes" if id(node) in writes else "reads"].add(field)
    return found


def _source(phase: type[Phase]) -> str:
    return Path(inspect.getsourcefile(phase)).read_text()


def _protocol_members() -> set[str]:
    members = set(PhaseSession.__annotations__)
    members |= {name for name, _ in inspect.getmembers(PhaseSession, inspect.isfunction)}
    return members


# --- the checkers can fail -----------------------------------------------------------------


def test_the_checkers_catch_what_breaks_the_rules():
    hooks = textwrap.dedent(
        """
        class Hooks:
            declared: int
            def hook(self):
                return self.declared + self.undeclared
        """
    )
    assert _undeclared_self(hooks) == {"undeclared"}
    phase = textwrap.dedent(
        """
        def on_step(session, step):
            session.data.measured.append(step)
            session.data.flops = {}
            session.data.worker_sweep.points.append(1)
            session.profiler = object()
            session.rogue = 1
            if session.data.model_alone and session.model_alone_step_ms():
                return session.secret
        """
    )
    uses = _uses(phase)
    assert uses["writes"] == {"measured", "flops"}
    assert uses["reads"] == {"model_alone", "worker_sweep"}
    assert uses["set"] == {"profiler", "rogue"}
    assert "secret" in uses["used"] - _protocol_members()


# --- the rules -----------------------------------------------------------------------------


def test_the_hooks_declare_every_member_of_the_session_they_use():
    source = Path(inspect.getsourcefile(StepHooks)).read_text()
    cls = next(
        n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "StepHooks"
    )
    assert _undeclared_self(ast.get_source_segment(source, cls)) == set()


def test_the_session_is_what_phases_see(tmp_path):
    session = CaptureSession(RunOptions())
    assert isinstance(session, PhaseSession)
    missing = {m for m in _protocol_members() if not hasattr(session, m)}
    assert not missing


@pytest.mark.parametrize("phase", PHASES + WHOLE_PHASES, ids=lambda p: p.__name__)
def test_a_phase_uses_the_surface_sets_what_it_lends_and_writes_what_it_names(phase):
    uses = _uses(_source(phase))
    assert uses["used"] <= _protocol_members(), uses["used"] - _protocol_members()
    assert uses["set"] - {"data"} <= set(LENT)
    assert uses["writes"] - _SHARED <= set(phase.writes)
    assert uses["reads"] - _SHARED - set(phase.writes) <= set(phase.reads)


@pytest.mark.parametrize("table", [PHASES, WHOLE_PHASES], ids=["run", "whole"])
def test_a_phase_that_reads_a_result_runs_after_the_phase_that_writes_it(table):
    for i, phase in enumerate(table):
        earlier = {field for p in table[:i] for field in p.writes}
        assert set(phase.reads) <= earlier, f"{phase.__name__} reads {phase.reads}"
