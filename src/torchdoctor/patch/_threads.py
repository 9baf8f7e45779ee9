"""``torch.set_num_threads(k)`` written into the script: its own call changed, else one added
after its imports (the worker sweep's pick of the main process's threads). Torch-free."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import libcst as cst

from ._edits import Change, Skipped, SourceFile, callee_name, dotted, literal, set_value
from ._project import Project
from ._remedies import THREADS, Remedy


def plan_threads(
    project: Project,
    threads: int,
    files: Sequence[Path],
    because: str,
    remedy: Remedy | None = None,
) -> Remedy:
    """``torch.set_num_threads(threads)``: the script's own call changed, else one added after
    the script's imports (``files``: the script first, then other files of the run to search).

    With ``remedy`` (the DataLoader settings the sweep picked together with this thread count),
    the change joins it, and is left out with the workers when their setting is.
    """
    if remedy is not None:
        workers = [s for s in remedy.skipped if s.setting in ("num_workers", "DataLoader")]
        if workers:
            remedy.skipped.append(
                Skipped(
                    "torch.set_num_threads",
                    f"it goes with the workers the sweep picked, whose setting is left out "
                    f"({workers[0].setting}): alone, {threads} thread(s) only slow the step",
                )
            )
            return remedy
    remedy = remedy or Remedy(THREADS, because)
    script = project.script
    if project.patchable(script, "torch.set_num_threads", remedy.skipped) is None:
        return remedy
    found = False
    for path in dict.fromkeys(p.resolve() for p in [script, *files]):
        if project.refuses(path) is not None:
            continue
        source = project.patchable(path, "torch.set_num_threads", remedy.skipped)
        if source is None:
            return remedy
        for call in source.nodes(cst.Call):
            if callee_name(call) != "set_num_threads" or not call.args:
                continue
            found = True
            arg = call.args[0]
            if not isinstance(arg.value, cst.Integer):
                remedy.skipped.append(
                    Skipped(
                        "torch.set_num_threads",
                        f"{project.rel(path)}:{source.line_of(call)} sets it from "
                        f"{source.code(arg.value)}: set it to {threads} there",
                    )
                )
                continue
            if arg.value.value != str(threads):
                source.plan(remedy.key, arg, set_value(literal(threads)))
                remedy.changes.append(
                    Change(
                        path,
                        source.line_of(call),
                        f"set_num_threads({arg.value.value}) → {threads}",
                    )
                )
    if not found:
        _add_threads_call(project.source(script), threads, remedy)
    return remedy


def _add_threads_call(source: SourceFile, threads: int, remedy: Remedy) -> None:
    body = source.module.body
    imports = [
        i
        for i, stmt in enumerate(body)
        if isinstance(stmt, cst.SimpleStatementLine)
        and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
    ]
    at = imports[-1] + 1 if imports else 0
    alias = _torch_alias(body)
    lines = [] if alias else ["import torch\n"]
    lines.append(f"{alias or 'torch'}.set_num_threads({threads})\n")
    new = [cst.parse_statement(text) for text in lines]
    line = source.line_of(body[at - 1]) + 1 if at else 1

    def insert(module: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(module, cst.Module)
        return module.with_changes(body=[*module.body[:at], *new, *module.body[at:]])

    source.plan(remedy.key, source.module, insert)
    remedy.changes.append(
        Change(source.path, line, f"torch.set_num_threads({threads}) added after the imports")
    )


def _torch_alias(body: Sequence[cst.BaseStatement]) -> str | None:
    """The name a top-level ``import torch`` (or ``import torch as th``) binds."""
    for stmt in body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if dotted(alias.name) == "torch":
                        return alias.asname.name.value if alias.asname else "torch"  # type: ignore[union-attr]
    return None
