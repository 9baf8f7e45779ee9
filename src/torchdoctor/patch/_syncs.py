"""Mechanical rewrites of the host round-trips the sync finder reports (docs/syncs.md).

- ``assert <tensor condition>`` (``tensor-assert``) → ``torch._assert_async(<condition>)``: the
  check runs on the device, without the host waiting for it.
- ``x[range(n), ...]`` (``python-index``) → ``x[torch.arange(n, device=x.device), ...]``: the
  index is made on the device instead of copied from a Python object every step.
- ``w = torch.tensor(CONSTANT, device=d)`` in a module's method (``constant-rebuilt``) → a buffer
  registered once in ``__init__`` (``persistent=False``: checkpoints do not change), read as
  ``self.w.to(d)`` (no copy once the module is on ``d``).
- ``print(... loss.item() ...)`` on every step of a loop with a step counter (``item``) → the
  same statement under ``if step % LOG_EVERY == 0:``: the value is read, and the host waits for
  the device, every :data:`LOG_EVERY` steps only.

Each is one remedy, judged by the losses it computes (a seeded run of the patched script against
the original) since a host round-trip costs nothing on a CPU. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import libcst as cst

from ..record import Finding
from ._edits import (
    Change,
    Skipped,
    SourceFile,
    callee_name,
    dotted,
    keyword,
    parameter_names,
    torch_name,
)
from ._project import Project
from ._remedies import Remedy

#: The sync finder's kinds this module rewrites, and each rewrite's title.
REWRITES = {
    "tensor-assert": "assert → torch._assert_async",
    "python-index": "range index → torch.arange on the device",
    "constant-rebuilt": "constant tensor → a buffer built once",
    "item": ".item() for logging → every {every} steps",
}
#: How often a rewritten logging statement runs (steps).
LOG_EVERY = 10
#: Calls whose statement is a log line (print, logging, TensorBoard, tqdm, Lightning, W&B): the
#: only ones read on fewer steps; ``losses.append(loss.item())`` keeps every value.
LOGGING_CALLS = frozenset({
    "print", "log", "info", "debug", "warning", "add_scalar", "add_scalars", "write",
    "set_postfix", "set_description", "log_metrics", "log_dict",
})  # fmt: skip


def plan_syncs(project: Project, findings: Iterable[Finding]) -> list[Remedy]:
    """One remedy per sync finding this module can rewrite (``sync-1``, ``sync-2``, ...)."""
    remedies = []
    for finding in findings:
        if finding.kind not in REWRITES or not finding.file or not finding.line:
            continue
        key = f"sync-{len(remedies) + 1}"
        remedy = Remedy(
            key,
            finding.title,
            title=(
                f"{REWRITES[finding.kind].format(every=LOG_EVERY)} "
                f"({Path(finding.file).name}:{finding.line})"
            ),
            numerics=True,
        )
        remedies.append(remedy)
        path = Path(finding.file)
        source = project.patchable(path, finding.kind, remedy.skipped)
        if source is None:
            continue
        torch = torch_name(source)
        if torch is None:
            remedy.skipped.append(Skipped(finding.kind, f"{path.name} does not `import torch`"))
            continue
        plan = {
            "tensor-assert": _plan_assert,
            "python-index": _plan_index,
            "constant-rebuilt": _plan_constant,
            "item": _plan_item,
        }[finding.kind]
        reason = plan(source, key, finding.line, torch, remedy)
        if reason is not None:
            remedy.skipped.append(Skipped(finding.kind, reason))
    return remedies


def _on_line(source: SourceFile, node_type: type, line: int) -> list:
    return [n for n in source.nodes(node_type) if source.spans(n, line)]


def _plan_assert(source: SourceFile, key: str, line: int, torch: str, remedy: Remedy) -> str | None:
    asserts = _on_line(source, cst.Assert, line)
    if len(asserts) != 1:
        return f"no single assert statement at line {line}"
    node = asserts[0]

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:  # the assert as the other edits left it
        assert isinstance(node, cst.Assert)
        args = [cst.Arg(node.test)]
        if isinstance(node.msg, cst.SimpleString):
            args.append(cst.Arg(node.msg))
        return cst.Expr(cst.Call(func=cst.parse_expression(f"{torch}._assert_async"), args=args))

    source.plan(key, node, rewrite)
    remedy.changes.append(
        Change(source.path, line, f"assert {source.code(node.test)} → {torch}._assert_async(...)")
    )
    return None


def _plan_index(source: SourceFile, key: str, line: int, torch: str, remedy: Remedy) -> str | None:
    planned = 0
    for sub in _on_line(source, cst.Subscript, line):
        base = dotted(sub.value)
        if base is None:
            continue
        for element in sub.slice:
            index = element.slice
            if not isinstance(index, cst.Index) or not isinstance(index.value, cst.Call):
                continue
            call = index.value
            if not (isinstance(call.func, cst.Name) and call.func.value == "range"):
                continue
            if any(a.keyword is not None or a.star for a in call.args):
                continue
            arange = cst.parse_expression(
                f"{torch}.arange({', '.join(source.code(a.value) for a in call.args)}, "
                f"device={base}.device)"
            )
            source.plan(key, call, lambda _, new=arange: new)
            remedy.changes.append(
                Change(
                    source.path,
                    line,
                    f"{source.code(call)} → {source.module.code_for_node(arange)}",
                )
            )
            planned += 1
    return None if planned else f"no `x[range(...)]` index at line {line}"


def _plan_item(source: SourceFile, key: str, line: int, torch: str, remedy: Remedy) -> str | None:
    lines = _on_line(source, cst.SimpleStatementLine, line)
    if len(lines) != 1 or len(lines[0].body) != 1 or not isinstance(lines[0].body[0], cst.Expr):
        return "the .item() is not in a statement of its own (its value is used): keep it"
    stmt = lines[0]
    call = stmt.body[0].value  # type: ignore[attr-defined]
    callee = callee_name(call) if isinstance(call, cst.Call) else ""
    if callee not in LOGGING_CALLS:
        return (
            f"the .item() feeds {callee or 'an expression'}(...), not a log line: reading it on "
            "fewer steps would change what the script computes"
        )
    loop = _innermost(source, cst.For, line)
    if loop is None or not any(s is stmt for s in loop.body.body):
        return "it is not read on every step of a loop (already read only on some steps?)"
    counter = _step_counter(loop)
    if counter is None:
        return "the loop has no step counter (`for step in range(...)` or `enumerate(...)`)"

    def guarded(node: cst.CSTNode) -> cst.CSTNode:  # the statement as the other edits left it
        return cst.If(
            test=cst.parse_expression(f"{counter} % {LOG_EVERY} == 0"),
            body=cst.IndentedBlock(body=[node.with_changes(leading_lines=[])]),  # type: ignore[list-item]
            leading_lines=node.leading_lines,  # type: ignore[attr-defined]
        )

    source.plan(key, stmt, guarded)
    remedy.changes.append(
        Change(source.path, line, f"read every {LOG_EVERY} steps: if {counter} % {LOG_EVERY} == 0")
    )
    return None


def _step_counter(loop: cst.For) -> str | None:
    """``step`` of ``for step in range(...)``, or ``i`` of ``for i, batch in enumerate(...)``."""
    iterated = loop.iter
    is_call = isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Name)
    called = iterated.func.value if is_call else ""  # type: ignore[union-attr]
    if isinstance(loop.target, cst.Name) and called == "range":
        return loop.target.value
    if isinstance(loop.target, cst.Tuple) and called == "enumerate" and loop.target.elements:
        first = loop.target.elements[0].value
        return first.value if isinstance(first, cst.Name) else None
    return None


def _plan_constant(
    source: SourceFile, key: str, line: int, torch: str, remedy: Remedy
) -> str | None:
    assigns = _on_line(source, cst.Assign, line)
    if len(assigns) != 1 or len(assigns[0].targets) != 1:
        return f"no single assignment at line {line}"
    assign = assigns[0]
    target = assign.targets[0].target
    value = assign.value
    if not isinstance(target, cst.Name) or not isinstance(value, cst.Call):
        return "the constant is not assigned to a plain name"
    if dotted(value.func) not in (f"{torch}.tensor", f"{torch}.as_tensor"):
        return f"the constant is not built by {torch}.tensor(...)"
    method = _innermost(source, cst.FunctionDef, line)
    owner = _innermost(source, cst.ClassDef, line)
    if method is None or owner is None or not method.params.params:
        return "the constant is not built in a method of a class"
    local = _local_names(method)
    data = [a for a in value.args if a.keyword is None]
    if len(data) != 1 or not _constant_data(data[0].value, local):
        return "its data is not a constant of the module (a local or a parameter feeds it)"
    name = target.value
    self_name = method.params.params[0].name.value
    if f"{self_name}.{name}" in source.code(owner).replace(" ", ""):
        return f"{owner.name.value} already uses self.{name}"
    device = keyword(value, "device")
    kept = [a for a in value.args if a.keyword is None or a.keyword.value != "device"]
    built = source.code(value.with_changes(args=_no_trailing_comma(kept)))
    register = cst.parse_statement(
        f'{self_name}.register_buffer("{name}", {built}, persistent=False)\n'
    )
    reason = _plan_register(source, key, owner, register)
    if reason is not None:
        return reason
    read = f"{self_name}.{name}" + (f".to({source.code(device.value)})" if device else "")
    source.plan(key, assign, lambda node: node.with_changes(value=cst.parse_expression(read)))
    remedy.changes.append(
        Change(source.path, line, f"{name} built once in __init__ (a buffer), read as {read}")
    )
    return None


def _plan_register(
    source: SourceFile, key: str, owner: cst.ClassDef, register: cst.BaseStatement
) -> str | None:
    """``register`` added to ``owner.__init__`` after its ``super().__init__(...)``, or a new
    ``__init__`` when the class has none and derives from ``nn.Module`` alone."""
    body = owner.body.body
    init = next(
        (s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None
    )
    if init is None:
        bases = [dotted(b.value) for b in owner.bases]
        if len(bases) != 1 or bases[0] not in ("nn.Module", "torch.nn.Module", "Module"):
            return f"{owner.name.value} has no __init__ to build the buffer in"
        new = cst.parse_statement("def __init__(self):\n    super().__init__()\n")
        assert isinstance(new, cst.FunctionDef)
        new = new.with_changes(
            body=new.body.with_changes(body=[*new.body.body, register]),
            leading_lines=[cst.EmptyLine(indent=False)],
        )

        def add_init(node: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(node, cst.ClassDef)
            inner = list(node.body.body)
            at = 1 if inner and _is_docstring(inner[0]) else 0
            init = new if at else new.with_changes(leading_lines=[])  # first in the class: none
            if at < len(inner) and not inner[at].leading_lines:  # a blank line after it too
                inner[at] = inner[at].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
            return node.with_changes(
                body=node.body.with_changes(body=[*inner[:at], init, *inner[at:]])
            )

        source.plan(key, owner, add_init)
        return None
    statements = list(init.body.body)
    at = next((i for i, s in enumerate(statements) if "__init__(" in source.code(s)), None)
    if at is None:
        return f"{owner.name.value}.__init__ does not call super().__init__()"

    def add_register(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.FunctionDef)
        inner = list(node.body.body)
        return node.with_changes(
            body=node.body.with_changes(body=[*inner[: at + 1], register, *inner[at + 1 :]])
        )

    source.plan(key, init, add_register)
    return None


def _innermost(source: SourceFile, node_type: type, line: int):
    found = _on_line(source, node_type, line)
    return max(found, key=source.line_of) if found else None


def _local_names(func: cst.FunctionDef) -> set[str]:
    """The function's parameters and every name it assigns."""
    names = set(parameter_names(func))

    class Collect(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            if isinstance(node.target, cst.Name):
                names.add(node.target.value)

        def visit_For(self, node: cst.For) -> None:
            if isinstance(node.target, cst.Name):
                names.add(node.target.value)

    func.body.visit(Collect())
    return names


def _constant_data(node: cst.BaseExpression, local: set[str]) -> bool:
    """A literal list or tuple of numbers, or a name the function neither takes nor assigns."""
    if isinstance(node, cst.Name):
        return node.value not in local
    if isinstance(node, (cst.List, cst.Tuple)):
        return all(
            isinstance(e.value, (cst.Integer, cst.Float, cst.UnaryOperation)) for e in node.elements
        )
    return False


def _no_trailing_comma(args: list[cst.Arg]) -> list[cst.Arg]:
    if args:
        args = [*args[:-1], args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    return args


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
