"""The trials' levers written into the code, where the model is called and built (docs/fix.md).

- ``amp`` (``--try amp``): the statements from the model's forward up to the ``backward`` call
  (the forward and the loss) under ``with torch.autocast(device_type=..., dtype=torch.bfloat16):``,
  with a comment that says the numerics change. fp16 (a device without bf16) needs a
  ``GradScaler`` around backward and the optimizer step: left out, with the reason.
- ``channels-last`` (``--try channels-last``): ``model = model.to(memory_format=...)`` after the
  model is built, and ``.contiguous(memory_format=torch.channels_last)`` on each 4-D input the
  trial saw the forward take.
- ``compile`` (``--try compile``): ``model.compile()`` after the model is built: the module is
  compiled in place, so its ``state_dict`` keys (and checkpoints) stay as they are, unlike
  ``model = torch.compile(model)``.

The model is the variable the script calls at the line where the run saw it train (a forward with
grad, in training mode; the largest such model); where it is built is :mod:`._model_site`'s.
What cannot be followed (``self.model``, a model passed in from another file) is left out with
the reason. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import libcst as cst

from ..record.lever_names import AMP, CHANNELS_LAST, COMPILE
from ..record.lever_names import LEVERS as LEVER_FACTS
from ._edits import (
    Change,
    Skipped,
    SourceFile,
    callee_name,
    insert_after,
    statements_of,
    torch_name,
)
from ._model_site import called_name, where_built
from ._project import Project
from ._remedies import Remedy

#: The trials this module writes (each as a remedy of its own name), and each remedy's title:
#: the lever table's levers whose ``fix`` remedy is their own (``foreach`` is the optimizer's
#: remedy, :func:`._remedies.plan_optimizer`).
LEVERS = {name: facts.title for name, facts in LEVER_FACTS.items() if facts.fix_remedy == name}
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
    try:
        if name == AMP:
            reason = _plan_amp(source, line, torch, detail, remedy)
        else:
            reason = _plan_model(source, line, torch, detail, remedy)
    except Exception as exc:  # noqa: BLE001 - a shape of code nobody foresaw: left out, said
        remedy.changes.clear()
        source.edits = [e for e in source.edits if e.remedy != name]
        reason = f"the patcher could not follow this code ({type(exc).__name__}: {exc})"[:300]
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
        return (
            f"the model is called at line {line} in a statement the patcher cannot wrap (a "
            "compound statement's header, or a body written on the same line)"
        )
    block, at = found
    body = list(block.body)
    if _calls_backward(body[at]):
        return (
            f"the forward and backward are one statement at line {line}: compute the loss in a "
            f"statement of its own, under {torch}.autocast"
        )
    end = next((k for k in range(at + 1, len(body)) if _calls_backward(body[k])), None)
    wrapped = body[at:end] if end is not None else body[at : at + 1]
    device = str(detail.get("device_type") or "cpu")
    header = f'{torch}.autocast(device_type="{device}", dtype={torch}.bfloat16)'
    held: list[cst.BaseStatement] = []

    def hold(node: Any) -> Any:
        held.extend(statements_of(node))
        return cst.RemovalSentinel.REMOVE

    def first(node: Any) -> Any:
        held.clear()  # each rendering of the file starts afresh
        return hold(node)

    def wrap(node: Any) -> Any:
        statements = [*held, *statements_of(node)]
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
        source.plan(remedy.key, stmt, wrap if last else first if k == 0 else hold, wraps=True)
    last_line = source.positions[wrapped[-1]].end.line
    lines = f"line {line}" if last_line == line else f"lines {line}–{last_line}"
    what = "from the model's call to the backward" if end is not None else "the forward"
    remedy.changes.append(Change(source.path, line, f"{lines} ({what}) under {header}"))
    return None


def _calls_backward(stmt: cst.CSTNode) -> bool:
    """Whether the statement calls ``.backward(...)`` (code, not a comment's words)."""
    found = []

    class Find(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "backward":
                found.append(node)

    stmt.visit(Find())
    return bool(found)


def _statement_block(
    source: SourceFile, line: int
) -> tuple[cst.IndentedBlock | cst.Module, int] | None:
    """The block holding the innermost simple statement written over ``line``, and its index
    there; ``None`` when the line is a compound statement's header or a one-line body."""
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
    source: SourceFile, line: int, torch: str, detail: Mapping[str, Any], remedy: Remedy
) -> str | None:
    recorded = str(detail.get("model") or "")
    name = called_name(source, line, recorded, torch)
    added = (
        "{0}.compile()  # torchdoctor fix: compiled in place, state_dict keys unchanged"
        if remedy.key == COMPILE
        else f"{{0}} = {{0}}.to(memory_format={torch}.channels_last)"
    )
    if name is None or name == "self":
        held = (
            "the model calls itself (self(...))"
            if name == "self"
            else f"the model is {recorded}, not a variable of {source.path.name}"
            if recorded
            else "the run did not see the model's name"
        )
        return f"{held}: add `{added.format('model').split('  #')[0]}` where the model is built"
    found = where_built(source, name, line)
    if isinstance(found, str):
        return f"{found}: add `{added.format(name).split('  #')[0]}` where the model is built"
    after, built = found
    text = added.format(built)
    source.plan(remedy.key, after, insert_after([cst.parse_statement(text + "\n")]), wraps=True)
    end = source.positions[after].end.line
    remedy.changes.append(
        Change(source.path, end, f"{text.split('  #')[0]} added after line {end}")
    )
    if remedy.key == CHANNELS_LAST:
        return _plan_inputs(source, line, name, torch, detail.get("inputs") or [], remedy)
    return None


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
    """Each 4-D positional input of the model's calls at ``line`` made channels_last."""
    calls = [c for c in source.nodes(cst.Call) if source.spans(c, line) and callee_name(c) == name]
    if not calls or not inputs:
        return (
            f"the model's 4-D input at line {line} is not one the patcher can find: convert it "
            f"with x.contiguous(memory_format={torch}.channels_last) before the forward"
        )
    for call in calls:
        args = [a for a in call.args if a.keyword is None]  # type: ignore[attr-defined]
        for i in inputs:
            if not isinstance(i, int) or i >= len(args) or any(a.star for a in args[: i + 1]):
                return (
                    f"the model's 4-D input is not a plain positional argument of the call at "
                    f"line {line}: convert it with x.contiguous(memory_format="
                    f"{torch}.channels_last) before the forward"
                )
            arg = args[i]
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
