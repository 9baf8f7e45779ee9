"""Mechanical rewrites of the host round-trips the sync finder reports (docs/syncs.md).

- ``assert <tensor condition>`` (``tensor-assert``) → ``torch._assert_async(<condition>)``: the
  check runs on the device, without the host waiting for it.
- ``x[range(n), ...]`` (``python-index``) → ``x[torch.arange(n, device=x.device), ...]``: the
  index is made on the device instead of copied from a Python object every step.
- ``w = torch.tensor(CONSTANT, device=d)`` in a module's method, or the constant passed inline
  (``f(pred, target, torch.Tensor([0.1] * 10).cuda())``, seed 004's) (``constant-rebuilt``) → a
  buffer registered once in ``__init__`` (``persistent=False``: checkpoints do not change), moved
  in place at its first read (``w = self.w = self.w.to(d)``; no copy after, also where the script
  never moves the module).
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
    statements_of,
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
            finding=(finding.kind, finding.file, finding.line),
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


#: Constructors of a constant tensor from Python data (``torch.Tensor([0.1] * 10)``: seed 004's).
_CONSTRUCTORS = frozenset(
    {"tensor", "as_tensor", "Tensor", "FloatTensor", "DoubleTensor", "LongTensor", "IntTensor"}
)
#: Calls that move a tensor built on the host: ``.to(device)``, ``.cuda()``.
_MOVES = frozenset({"to", "cuda"})


def _plan_constant(
    source: SourceFile, key: str, line: int, torch: str, remedy: Remedy
) -> str | None:
    """A constant rebuilt every call, assigned (``w = torch.tensor(C, device=d)``) or passed
    inline (``weighted_nll(pred, target, torch.Tensor([0.1] * 10).cuda())``), becomes a buffer
    built once in ``__init__``. It is read moved in place (``w = self.w = self.w.to(d)``): the
    buffer goes to the device with its first use, then ``.to`` is a no-op, also for a loss
    module the script never moves (a buffer read as ``self.w.to(d)`` there copied every step)."""
    method = _innermost(source, cst.FunctionDef, line)
    owner = _innermost(source, cst.ClassDef, line)
    if method is None or owner is None or not method.params.params:
        return "the constant is not built in a method of a class"
    local = _local_names(method)
    found = _constant_on(source, line, torch, local)
    if isinstance(found, str):
        return found
    expr, built, move = found
    name, assign = _constant_name(source, expr, line)
    if name is None:
        return f"no assignment or call argument takes the constant at line {line}"
    self_name = method.params.params[0].name.value
    if f"{self_name}.{name}" in source.code(owner).replace(" ", ""):
        return f"{owner.name.value} already uses self.{name}"
    register = cst.parse_statement(
        f'{self_name}.register_buffer("{name}", {built}, persistent=False)\n'
    )
    reason = _plan_register(source, key, owner, register)
    if reason is not None:
        return reason
    attr = f"{self_name}.{name}"
    moved = cst.parse_expression(f"{attr}{move}")
    if assign is not None:  # w = self.w = self.w.to(d): the local as before, the buffer moved
        targets = [*assign.targets, cst.AssignTarget(cst.parse_expression(attr))] if move else None
        source.plan(
            key,
            assign,
            lambda node: node.with_changes(value=moved, targets=targets or node.targets),
        )
        read = f"{name} = {attr} = {attr}{move}" if move else f"{name} = {attr}"
    else:  # the argument reads the buffer, moved in place on the line before
        statement = _innermost(source, cst.SimpleStatementLine, line)
        if statement is None:
            return f"the constant at line {line} is not in a simple statement"
        source.plan(key, expr, lambda _: cst.parse_expression(attr))
        if move:
            before = cst.parse_statement(f"{attr} = {attr}{move}\n")
            source.plan(key, statement, _insert_before(before), wraps=True)
        read = f"{attr} (moved in place: {attr} = {attr}{move})" if move else attr
    remedy.changes.append(
        Change(source.path, line, f"{name} built once in __init__ (a buffer), read as {read}")
    )
    return None


def _constant_on(
    source: SourceFile, line: int, torch: str, local: set[str]
) -> tuple[cst.BaseExpression, str, str] | str:
    """The constant expression at ``line`` (its move included), the constructor call as the
    buffer builds it (no ``device=``), and how it is moved (``.to(d)``, ``.cuda()``, or "")."""
    names = {f"{torch}.{c}" for c in _CONSTRUCTORS}
    for call in _on_line(source, cst.Call, line):
        if dotted(call.func) not in names:
            continue
        data = [a for a in call.args if a.keyword is None]
        if len(data) != 1 or not _constant_data(data[0].value, local):
            return "its data is not a constant of the module (a local or a parameter feeds it)"
        device = keyword(call, "device")
        kept = [a for a in call.args if a.keyword is None or a.keyword.value != "device"]
        built = source.code(call.with_changes(args=_no_trailing_comma(kept)))
        move = f".to({source.code(device.value)})" if device else ""
        expr: cst.BaseExpression = call
        outer = _mover_of(source, call, line)
        if outer is not None:
            move = source.code(outer)[len(source.code(call)) :]
            expr = outer
        return expr, built, move
    return f"the constant is not built by {torch}.tensor(...) or {torch}.Tensor(...)"


def _mover_of(source: SourceFile, call: cst.Call, line: int) -> cst.Call | None:
    """``call.cuda()`` or ``call.to(...)``: the call that moves ``call``'s tensor, if one does."""
    for outer in _on_line(source, cst.Call, line):
        func = outer.func
        if isinstance(func, cst.Attribute) and func.value is call and func.attr.value in _MOVES:
            return outer
    return None


def _constant_name(
    source: SourceFile, expr: cst.BaseExpression, line: int
) -> tuple[str | None, cst.Assign | None]:
    """The buffer's name: the plain name ``expr`` is assigned to, else the keyword or the
    parameter (of a function defined in the file) it is passed as."""
    for assign in _on_line(source, cst.Assign, line):
        if assign.value is expr and len(assign.targets) == 1:
            target = assign.targets[0].target
            return (target.value, assign) if isinstance(target, cst.Name) else (None, None)
    for call in _on_line(source, cst.Call, line):
        for position, arg in enumerate(call.args):
            if arg.value is not expr:
                continue
            if arg.keyword is not None:
                return arg.keyword.value, None
            callee = callee_name(call)
            defined = [
                f
                for f in source.nodes(cst.FunctionDef)
                if f.name.value == callee  # type: ignore[attr-defined]
            ]
            params = parameter_names(defined[0]) if len(defined) == 1 else []
            return (params[position] if position < len(params) else None), None
    return None, None


def _insert_before(statement: cst.BaseStatement):
    """A wrapping edit of a statement: ``statement`` added before it."""

    def apply(node):
        first, *rest = statements_of(node) or [None]
        lead = getattr(first, "leading_lines", ())
        moved = statement.with_changes(leading_lines=lead)
        if first is None:
            return cst.FlattenSentinel([moved])
        return cst.FlattenSentinel([moved, first.with_changes(leading_lines=[]), *rest])

    return apply


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
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        # ``[0.1] * 10``, ``[0.1] * NUM_CLASSES``: a literal list repeated a constant count
        sides = (node.left, node.right)
        count = any(isinstance(n, cst.Integer) or _constant_data(n, local) for n in sides)
        return count and any(
            isinstance(n, (cst.List, cst.Tuple)) and _constant_data(n, local) for n in sides
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
