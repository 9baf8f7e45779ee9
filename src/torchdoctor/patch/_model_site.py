"""Where the script builds its model: the statement after which a line may change it
(``model = model.to(memory_format=...)``, ``model.compile()``). Torch-free.

The model is the variable the script calls at the line where the run saw it train. It is looked
for in the scopes that line reads it from, innermost first:

- a **parameter** of the function that trains (``def train(model, ...)``): the variable the
  file's calls of that function pass for it (``train(net, ...)``, ``trainer.fit(net)``), looked
  for from the call;
- a **local** of that function or of a function around it (a closure): the last assignment before
  the use;
- a **global**: assigned at module level or in a function that declares it ``global``; the last
  assignment before the module-level call that leads to the use, else the last in the file.

An assignment is ``x = ...``, ``x: T = ...`` or one name of ``x, y = ...``; a constant (``model =
None``, ``model = "resnet"``) is a placeholder, never the model. The line goes after the statement
that holds the assignment in the block that also holds the use (an ``if``/``else`` building it
two ways gets one line after the whole ``if``), else right after the assignment's statement.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from ._edits import SourceFile, is_literal, parameter_names

#: Names called at a model's line that are not the model.
_NOT_MODELS = frozenset({"len", "range", "print", "float", "int", "list", "tuple", "dict", "zip"})
#: Calls followed from a parameter to the caller's variable, at most.
_HOPS = 3


def called_name(source: SourceFile, line: int, recorded: str, torch: str) -> str | None:
    """The variable the script calls as its model at ``line``: the run's name for it when the
    line calls that name (``model(x)`` or ``model.forward(x)``); else, when the run knew it by
    another plain name (an alias), the one plain name called there."""
    called = set()
    for call in source.nodes(cst.Call):
        if not source.spans(call, line):
            continue
        func = call.func  # type: ignore[attr-defined]
        if isinstance(func, cst.Name):
            called.add(func.value)
        elif (
            isinstance(func, cst.Attribute)
            and func.attr.value == "forward"
            and isinstance(func.value, cst.Name)
        ):
            called.add(func.value.value)
    called -= _NOT_MODELS | {torch}
    if recorded in called or (recorded == "self" and not called):
        return recorded
    if recorded and not recorded.isidentifier():
        return None  # self.model: what else the line calls is not the model
    return next(iter(called)) if len(called) == 1 else None


def where_built(
    source: SourceFile, name: str, use_line: int, hops: int = 0
) -> tuple[Any, str] | str:
    """The statement after which the model ``name`` (used at ``use_line``) is built, and its
    name there; or why it cannot be found."""
    for depth, func in enumerate(_functions_at(source, use_line)):
        if name in parameter_names(func):
            if hops >= _HOPS:
                return f"{name} is passed through more than {_HOPS} calls"
            passed = _passed_as(source, func, name)
            if isinstance(passed, str):
                return passed
            return where_built(source, passed[0], passed[1], hops + 1)
        local = [
            a for a in _assignments(source, name) if _function_at(source, _line(source, a)) is func
        ]
        if local and not _declares_global(func, name):
            # read in a function nested in this one (a closure): the order of lines says nothing
            return _pick(source, local, name, use_line, ordered=depth == 0)
    found = [
        a
        for a in _assignments(source, name)
        if (f := _function_at(source, _line(source, a))) is None or _declares_global(f, name)
    ]
    if not found:
        return f"{name} is not built in {source.path.name} (no assignment of it but a constant)"
    outer = _functions_at(source, use_line)
    if not outer:
        return _pick(source, found, name, use_line, ordered=True)
    top = outer[-1].name.value
    calls = [
        c
        for c in source.nodes(cst.Call)
        if isinstance(c.func, cst.Name)  # type: ignore[attr-defined]
        and c.func.value == top  # type: ignore[attr-defined]
        and _function_at(source, source.line_of(c)) is None
    ]
    if calls:  # the module-level call that leads to the use
        return _pick(source, found, name, source.line_of(calls[0]), ordered=True)
    return _pick(source, found, name, use_line, ordered=False)


def _pick(
    source: SourceFile, found: list[Any], name: str, use_line: int, ordered: bool
) -> tuple[Any, str] | str:
    before = [a for a in found if _line(source, a) < use_line] if ordered else found
    if not before:
        return f"{name} is not assigned before it is used in {source.path.name}"
    assigned = _line(source, before[-1])
    after = _statement_before(source, assigned, use_line) if ordered else None
    after = after or _holding_statement(source, assigned)
    if after is None:
        return f"{name} is built where the patcher cannot add a line after it"
    return after, name


def _assignments(source: SourceFile, name: str) -> list[Any]:
    """Every statement that binds ``name`` to something other than a constant, in order."""
    found = []
    for node in source.nodes(cst.Assign):
        for target in node.targets:  # type: ignore[attr-defined]
            if _binds(target.target, name) and not (
                isinstance(target.target, cst.Name) and is_literal(node.value)  # type: ignore[attr-defined]
            ):
                found.append(node)
                break
    for node in source.nodes(cst.AnnAssign):
        value = node.value  # type: ignore[attr-defined]
        if _binds(node.target, name) and value is not None and not is_literal(value):  # type: ignore[attr-defined]
            found.append(node)
    return sorted(found, key=lambda n: _line(source, n))


def _binds(target: cst.BaseExpression, name: str) -> bool:
    if isinstance(target, cst.Name):
        return target.value == name
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(_binds(e.value, name) for e in target.elements)
    return False


def _passed_as(source: SourceFile, func: cst.FunctionDef, param: str) -> tuple[str, int] | str:
    """The variable the file's calls of ``func`` pass as ``param``, and the first call's line
    (a method's calls, ``obj.fit(net)``, pass it one place earlier: ``self`` is not written)."""
    params = parameter_names(func)
    names = set()
    first = None
    for call in source.nodes(cst.Call):
        callee = call.func  # type: ignore[attr-defined]
        if isinstance(callee, cst.Name) and callee.value == func.name.value:
            index = params.index(param)
        elif isinstance(callee, cst.Attribute) and callee.attr.value == func.name.value:
            index = params.index(param) - (1 if params[:1] in (["self"], ["cls"]) else 0)
        else:
            continue
        args = call.args  # type: ignore[attr-defined]
        arg = next((a for a in args if a.keyword and a.keyword.value == param), None)
        positional = [a for a in args if a.keyword is None]
        if arg is None and not any(a.star for a in positional) and 0 <= index < len(positional):
            arg = positional[index]
        names.add(arg.value.value if arg is not None and isinstance(arg.value, cst.Name) else None)
        first = first or source.line_of(call)
    if first is None:
        return (
            f"{param} is a parameter of {func.name.value}(), which {source.path.name} does not call"
        )
    if len(names) != 1 or None in names:
        return f"{func.name.value}() is called with other models than one variable as {param}"
    return names.pop(), first  # type: ignore[return-value]


def _statement_before(source: SourceFile, assigned: int, used: int) -> Any:
    """In the innermost block holding both lines in different statements, the statement that
    holds ``assigned`` (the model's line goes after it, before the use)."""
    best = None
    for block in [*source.nodes(cst.IndentedBlock), source.module]:
        body = list(block.body)  # type: ignore[attr-defined]
        holding = [i for i, s in enumerate(body) if source.spans(s, assigned)]
        using = [i for i, s in enumerate(body) if source.spans(s, used)]
        if holding and using and holding[0] < using[0]:
            span = source.positions[body[-1]].end.line - source.positions[body[0]].start.line
            if best is None or span < best[0]:
                best = (span, body[holding[0]])
    return best[1] if best is not None else None


def _holding_statement(source: SourceFile, line: int) -> Any:
    """The innermost statement of any block that holds ``line``."""
    best = None
    for block in [*source.nodes(cst.IndentedBlock), source.module]:
        for stmt in block.body:  # type: ignore[attr-defined]
            if source.spans(stmt, line):
                pos = source.positions[stmt]
                span = pos.end.line - pos.start.line
                if best is None or span < best[0]:
                    best = (span, stmt)
    return best[1] if best is not None else None


def _declares_global(func: cst.FunctionDef, name: str) -> bool:
    found = []

    class Find(cst.CSTVisitor):
        def visit_Global(self, node: cst.Global) -> None:
            found.extend(n.name.value for n in node.names)

    func.body.visit(Find())
    return name in found


def _functions_at(source: SourceFile, line: int) -> list[cst.FunctionDef]:
    """The functions around ``line``, innermost first."""
    funcs = [f for f in source.nodes(cst.FunctionDef) if source.spans(f, line)]
    return list(reversed(funcs))  # type: ignore[arg-type]


def _function_at(source: SourceFile, line: int) -> cst.FunctionDef | None:
    funcs = _functions_at(source, line)
    return funcs[0] if funcs else None


def _line(source: SourceFile, node: cst.CSTNode) -> int:
    return source.line_of(node)
