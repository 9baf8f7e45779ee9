"""The trials' levers written into the code, where the model is called and built (docs/fix.md).

- ``amp`` (``--try amp``): the statements from the model's forward up to the ``backward`` call
  (the forward and the loss) under ``with torch.autocast(device_type=..., dtype=torch.bfloat16):``,
  with a comment that says the numerics change. fp16 (a device without bf16) needs a
  ``GradScaler`` around backward and the optimizer step: left out, with the reason.
- ``channels-last`` (``--try channels-last``): ``.to(memory_format=torch.channels_last)`` on the
  value the model's variable is assigned, and ``.contiguous(memory_format=torch.channels_last)``
  on each 4-D input the trial saw the forward take.
- ``compile`` (``--try compile``): ``model.compile()`` after the model's assignment: the module
  is compiled in place, so its ``state_dict`` keys (and checkpoints) stay as they are, unlike
  ``model = torch.compile(model)``.

The model is found by the call the run saw (``file:line``) and the script's name for it there. A
model that is not a variable of that file (``self.model``, a parameter with no assignment in the
file, one assigned in several functions) is left out with the reason. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import libcst as cst

from ._edits import Change, Skipped, SourceFile, assignments, callee_name, torch_name
from ._project import Project
from ._remedies import Remedy

AMP, CHANNELS_LAST, COMPILE = "amp", "channels-last", "compile"
#: The trials this module writes, and each remedy's title.
LEVERS = {
    AMP: "torch.autocast around the forward and loss",
    CHANNELS_LAST: "channels_last memory format",
    COMPILE: "model.compile()",
}
#: The comment above a hunk that changes what the training computes.
AMP_COMMENT = "# torchdoctor fix: bf16 autocast changes the numerics: check the loss curve"


def plan_lever(project: Project, name: str, detail: Mapping[str, Any], because: str) -> Remedy:
    """The ``name`` trial's lever (one of :data:`LEVERS`) planned in the project's code;
    ``detail`` is the trial's (where the model is called, its name, the device)."""
    remedy = Remedy(name, because, title=LEVERS[name])
    if name == AMP:
        remedy.caveat = (
            "changes the numerics: matmuls and convolutions compute in bf16 (8-bit "
            "mantissas); check the loss curve"
        )
    where = str(detail.get("model_at") or "")
    file, _, line_text = where.rpartition(":")
    if not file or not line_text.isdigit():
        remedy.skipped.append(Skipped(name, "the run did not see where the model is called"))
        return remedy
    path, line = Path(file), int(line_text)
    source = project.patchable(path, name, remedy.skipped)
    if source is None:
        return remedy
    torch = torch_name(source)
    if torch is None:
        remedy.skipped.append(Skipped(name, f"{path.name} does not `import torch`"))
        return remedy
    if name == AMP:
        reason = _plan_amp(source, line, torch, detail, remedy)
    else:
        reason = _plan_model(project, source, line, torch, detail, remedy)
    if reason is not None:
        remedy.skipped.append(Skipped(name, reason))
    return remedy


# --- amp -----------------------------------------------------------------------------------------


def _plan_amp(
    source: SourceFile, line: int, torch: str, detail: Mapping[str, Any], remedy: Remedy
) -> str | None:
    if detail.get("dtype") != "bfloat16":
        return (
            f"this device computes in {detail.get('dtype', 'float16')} under autocast, which needs "
            f"a {torch}.amp.GradScaler around backward and the optimizer step: write it by hand "
            "(the trial's code shows how)"
        )
    found = _statement_block(source, line)
    if found is None:
        return f"the model is called in a compound statement's header at line {line}"
    block, at = found
    body = list(block.body)
    if ".backward(" in source.code(body[at]):
        return (
            f"the forward and backward are one statement at line {line}: compute the loss in a "
            f"statement of its own, under {torch}.autocast"
        )
    end = next((k for k in range(at + 1, len(body)) if ".backward(" in source.code(body[k])), None)
    wrapped = body[at:end] if end is not None else body[at : at + 1]
    device = str(detail.get("device_type") or "cpu")
    header = f'{torch}.autocast(device_type="{device}", dtype={torch}.bfloat16)'
    held: list[cst.BaseStatement] = []

    def hold(node: cst.CSTNode) -> Any:
        held.append(node)  # type: ignore[arg-type]
        return cst.RemovalSentinel.REMOVE

    def first(node: cst.CSTNode) -> Any:
        held.clear()  # each rendering of the file starts afresh
        return hold(node)

    def wrap(node: cst.CSTNode) -> cst.CSTNode:
        statements = [*held, node]
        held.clear()
        lead = statements[0].leading_lines  # type: ignore[attr-defined]
        statements[0] = statements[0].with_changes(leading_lines=[])
        return cst.With(
            items=[cst.WithItem(cst.parse_expression(header))],
            body=cst.IndentedBlock(body=statements),  # type: ignore[arg-type]
            leading_lines=[*lead, cst.EmptyLine(comment=cst.Comment(AMP_COMMENT))],
        )

    for k, stmt in enumerate(wrapped):
        last = k == len(wrapped) - 1
        source.plan(remedy.key, stmt, wrap if last else first if k == 0 else hold)
    last_line = source.positions[wrapped[-1]].end.line
    lines = f"line {line}" if last_line == line else f"lines {line}–{last_line}"
    what = "the forward and loss" if end is not None else "the forward"
    remedy.changes.append(Change(source.path, line, f"{lines} ({what}) under {header}"))
    return None


def _statement_block(
    source: SourceFile, line: int
) -> tuple[cst.IndentedBlock | cst.Module, int] | None:
    """The block holding the innermost simple statement written over ``line``, and its index
    there; ``None`` when the line is a compound statement's header."""
    simple = [s for s in source.nodes(cst.SimpleStatementLine) if source.spans(s, line)]
    if not simple:
        return None
    stmt = simple[-1]
    for block in [*source.nodes(cst.IndentedBlock), source.module]:
        for index, child in enumerate(block.body):  # type: ignore[attr-defined]
            if child is stmt:
                return block, index  # type: ignore[return-value]
    return None


# --- channels_last and compile -------------------------------------------------------------------


def _plan_model(
    project: Project,
    source: SourceFile,
    line: int,
    torch: str,
    detail: Mapping[str, Any],
    remedy: Remedy,
) -> str | None:
    name = str(detail.get("model") or "")
    fix = (
        f"{name or 'model'}.compile() where the model is built"
        if remedy.key == COMPILE
        else f"{name or 'model'}.to(memory_format={torch}.channels_last) where the model is built"
    )
    if not name.isidentifier():
        held = f"the model is {name}" if name else "the run did not see the model's name"
        return f"{held}, not a variable of {source.path.name}: add {fix}"
    assign = _model_assignment(source, name)
    if assign is None:
        return f"{name} is not assigned once in {source.path.name} (or in one function): add {fix}"
    at = source.line_of(assign)
    if remedy.key == COMPILE:
        statement = next(
            s
            for s in source.nodes(cst.SimpleStatementLine)
            if any(small is assign for small in s.body)  # type: ignore[attr-defined]
        )
        added = cst.parse_statement(
            f"{name}.compile()  # torchdoctor fix: compiled in place, state_dict keys unchanged\n"
        )
        source.plan(remedy.key, statement, lambda node: cst.FlattenSentinel([node, added]))
        remedy.changes.append(Change(source.path, at, f"{name}.compile() added after line {at}"))
        return None
    source.plan(
        remedy.key, assign, lambda node: node.with_changes(value=_method(node.value, "to", torch))
    )
    remedy.changes.append(
        Change(source.path, at, f"{name} = ...to(memory_format={torch}.channels_last)")
    )
    return _plan_inputs(source, line, name, torch, detail.get("inputs") or [], remedy)


def _model_assignment(source: SourceFile, name: str) -> cst.Assign | cst.AnnAssign | None:
    """The assignment that gives ``name`` its model: the only one, or the last of several in one
    function (``model = Net()`` then ``model = model.to(device)``)."""
    found = [a for a in assignments(source, name) if a.value is not None]
    if not found:
        return None
    scopes = {_scope(source, a) for a in found}
    return found[-1] if len(scopes) == 1 else None


def _scope(source: SourceFile, node: cst.CSTNode) -> int:
    """The line of the innermost function holding ``node`` (0 for the module)."""
    line = source.line_of(node)
    funcs = [f for f in source.nodes(cst.FunctionDef) if source.spans(f, line)]
    return source.line_of(funcs[-1]) if funcs else 0


def _method(value: cst.BaseExpression, method: str, torch: str) -> cst.BaseExpression:
    """``value.method(memory_format=torch.channels_last)``, in parentheses where needed."""
    simple = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
    if not isinstance(value, simple) and not value.lpar:
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(
        func=cst.Attribute(value=value, attr=cst.Name(method)),
        args=[
            cst.Arg(
                keyword=cst.Name("memory_format"),
                value=cst.parse_expression(f"{torch}.channels_last"),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.SimpleWhitespace(""),
                ),
            )
        ],
    )


def _plan_inputs(
    source: SourceFile, line: int, name: str, torch: str, inputs: list, remedy: Remedy
) -> str | None:
    """Each 4-D positional input of the forward call at ``line`` made channels_last."""
    calls = [c for c in source.nodes(cst.Call) if source.spans(c, line) and callee_name(c) == name]
    if not calls or not inputs:
        return (
            f"the model's 4-D input at line {line} is not one the patcher can find: convert it "
            f"with x.contiguous(memory_format={torch}.channels_last) before the forward"
        )
    call = calls[-1]
    positional = [a for a in call.args if a.keyword is None and not a.star]
    wanted = [positional[i] for i in inputs if isinstance(i, int) and i < len(positional)]
    if not wanted:
        return f"the model's 4-D input is not a positional argument of the call at line {line}"
    for arg in wanted:
        source.plan(
            remedy.key,
            arg,
            lambda node: node.with_changes(value=_method(node.value, "contiguous", torch)),
        )
        remedy.changes.append(
            Change(
                source.path,
                source.line_of(arg),
                f"{source.code(arg.value)} → "
                f"{source.code(arg.value)}.contiguous(memory_format={torch}.channels_last)",
            )
        )
    return None
