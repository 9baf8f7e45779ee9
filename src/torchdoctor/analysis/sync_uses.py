"""What a sync's value is for, read off the user's statement: a value used at once (an RL
action handed to the environment) cannot be read "every k steps", and a read made with grad off
(an evaluation's) is worth reading once per evaluation, not per batch. Pure; no torch."""

from __future__ import annotations

import ast

#: Calls that log, format, keep or accumulate a value: advice to read it every k steps fits them.
_KEEPING = frozenset(
    {
        "print", "log", "info", "debug", "warning", "write", "format", "str", "repr", "append",
        "extend", "add", "update", "add_scalar", "add_scalars", "log_dict", "log_metrics",
        "set_postfix", "set_description", "record", "put", "setdefault",
        "min", "max", "sum", "len", "isclose", "isnan", "isinf", "isfinite",
    }
)  # fmt: skip
#: Conversions a value passes through on its way to what uses it.
_THROUGH = frozenset({"int", "float", "bool", "round", "abs"})
#: The sync operations whose value the statement receives.
_READS = frozenset({"item", "tolist", "numpy", "cpu"})


def used_at_once(source: str | None) -> str | None:
    """The name of the call the statement hands a synced value to at once (``env.step`` for
    ``env.step(action.item())``), or ``None`` when it logs, keeps or only assigns it."""
    tree = _parse(source)
    if tree is None:
        return None
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _name(node.func) in _READS):
            continue
        value: ast.AST = node
        parent = parents.get(value)
        while isinstance(parent, ast.Call) and _name(parent.func) in _THROUGH:
            value, parent = parent, parents.get(parent)
        if isinstance(parent, ast.Call) and value is not parent.func:
            name = _name(parent.func)
            if name and name not in _KEEPING and name not in _READS:
                return _dotted(parent.func)
    return None


def _parse(source: str | None) -> ast.AST | None:
    """The statement as a tree; a compound statement's header gets a body to parse."""
    if not source:
        return None
    text = source.strip()
    for candidate in (text, f"{text}\n    pass"):
        try:
            return ast.parse(candidate)
        except SyntaxError:
            continue
    return None


def _name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _dotted(func: ast.AST) -> str:
    try:
        return ast.unparse(func)
    except Exception:  # noqa: BLE001 - a name for words only
        return _name(func) or "a call"


def used_at_once_fix(user: str) -> str:
    """The fix of a sync whose value ``user`` needs at once."""
    return (
        f"Its value is used at once (passed to `{user}`), so reading it every k steps is no "
        "fix: make each read serve more, e.g. a batch of environments stepped with one read of "
        "all their actions, or compute it where it is used (a small policy acting on one "
        "observation at a time can run on the CPU, with no device round trip)."
    )


#: The fix of a sync made with grad off (an evaluation's).
NO_GRAD_FIX = (
    "This read runs with grad off, outside what the backward trains: in an evaluation, keep the "
    "values on the device while it runs (`total += loss`, `correct += (pred == y).sum()`) and "
    "read them once when it ends, not once per batch; where the value is needed at once (an "
    "action), make each read serve more (a batch of environments, one read for all)."
)


def no_grad_count(calls: int, steps: int) -> str:
    """How often a read made with grad off happened: in the watched steps, not per step (an
    evaluation need not run every step)."""
    return f"{calls} time{'s' if calls != 1 else ''} in {steps} watched step{'s' if steps != 1 else ''}, with grad off"


def assigned_name(statement: str | None) -> str | None:
    """The one name a statement assigns (``action = select_action(state)``), else ``None``."""
    tree = _parse(statement)
    body = getattr(tree, "body", None)
    if not body or not isinstance(body[0], ast.Assign) or len(body[0].targets) != 1:
        return None
    target = body[0].targets[0]
    return target.id if isinstance(target, ast.Name) else None


def returns(statement: str | None) -> bool:
    """Whether the statement returns its value to the caller (``return action.item()``)."""
    tree = _parse(statement)
    body = getattr(tree, "body", None)
    return bool(body) and isinstance(body[0], ast.Return)


def used_later(name: str, statements: list[str]) -> str | None:
    """The call the next statements hand ``name`` to at once (``env.step(action)`` after
    ``action = select_action(state)``), or ``None`` where they log or keep it or do not use it."""
    for statement in statements:
        tree = _parse(statement)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _name(node.func) in _KEEPING | _THROUGH:
                continue
            args = [*node.args, *(k.value for k in node.keywords)]
            if any(_is_name(a, name) for a in args):
                return _dotted(node.func)
    return None


def _is_name(node: ast.AST, name: str) -> bool:
    """``name`` itself, or ``name`` through a conversion (``int(action)``)."""
    if isinstance(node, ast.Name):
        return node.id == name
    return (
        isinstance(node, ast.Call)
        and _name(node.func) in _THROUGH
        and any(_is_name(a, name) for a in node.args)
    )
