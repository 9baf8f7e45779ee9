"""DataLoader settings written away from the ``DataLoader(...)`` call, followed to the one place
they are defined (``patch._remedies`` plans the edit there):

- a ``functools.partial(DataLoader, ...)`` bound once to a name the run's line calls
  (``make_loader = partial(DataLoader, batch_size=64, num_workers=0)``, then
  ``loader = make_loader(ds)``): the partial's arguments are the loader's;
- a config class's field default (``num_workers=cfg.workers`` with ``class Config: workers: int
  = 0``, a dataclass or a plain class), unless a construction of the class passes it (then that
  argument) or passes ``**`` (then where, since the value may come from there);
- a value read from a config file (YAML, JSON, TOML) is said to be set there, naming the file
  where the script spells it.

Torch-free.
"""

from __future__ import annotations

import re

import libcst as cst

from ._edits import (
    Change,
    SourceFile,
    assignments,
    callee_name,
    dotted,
    is_literal,
    keyword,
    literal,
    set_value,
)

#: ``_field_default``'s answer when no class of the files declares the field.
NOT_DECLARED = "not declared"
#: A config file's name as a script spells it in a string.
_CONFIG_FILE = re.compile(r"""["']([^"'\s]+\.(?:ya?ml|json|toml|cfg|ini))["']""")
#: Modules that read config files.
_CONFIG_READERS = ("yaml", "omegaconf", "hydra", "tomllib", "toml", "configparser")


def loader_partial(source: SourceFile, line: int) -> tuple[cst.Call, cst.Call] | None:
    """At ``line``, a call of a name bound once (in the file) to ``functools.partial`` of a
    ``*DataLoader``: ``(the call at the line, the partial(...) call)``; ``None`` otherwise."""
    for call in source.nodes(cst.Call):
        if not source.spans(call, line) or not isinstance(call.func, cst.Name):
            continue
        assigns = assignments(source, call.func.value)
        if len(assigns) != 1 or not isinstance(made := assigns[0].value, cst.Call):
            continue
        first = made.args[0] if made.args else None
        if (
            callee_name(made) == "partial"
            and first is not None
            and first.keyword is None
            and (dotted(first.value) or "").endswith("DataLoader")
        ):
            return call, made
    return None


def field_default(
    files: list[SourceFile], dest: str, name: str, value: object, remedy
) -> str | None:
    """``num_workers=cfg.workers``: the default of ``workers`` declared in a class of ``files``
    changed (``None``), or why not; :data:`NOT_DECLARED` where no class declares it."""
    declared = [
        (f, owner, stmt)
        for f in files
        for owner in f.nodes(cst.ClassDef)
        for stmt in owner.body.body  # type: ignore[attr-defined]
        if _declares(stmt, dest)
    ]
    if not declared:
        return NOT_DECLARED
    owners = sorted({owner.name.value for _, owner, _ in declared})  # type: ignore[attr-defined]
    if len(declared) > 1:
        return (
            f"{name} comes from {dest!r}, declared in {', '.join(owners)}: set it to {value!r} in "
            "the one your run uses"
        )
    f, owner, stmt = declared[0]
    assign = stmt.body[0]
    built = [
        (g, call)
        for g in files
        for call in g.nodes(cst.Call)
        if callee_name(call) == owner.name.value  # type: ignore[attr-defined]
    ]
    for g, call in built:
        where = f"{g.path.name}:{g.line_of(call)}"
        given = keyword(call, dest)
        if given is not None:
            if not is_literal(given.value):
                return f"{owner.name.value}(...) at {where} passes {dest}={g.code(given.value)}: make it {value!r}"  # type: ignore[attr-defined]
            old = g.code(given.value)
            if old != repr(value):
                g.plan(remedy.key, given, set_value(literal(value)))
                remedy.changes.append(
                    Change(g.path, g.line_of(given), f"{dest}={old} → {value!r} ({name})")
                )
            return None
        if any(a.star == "**" for a in call.args):
            held = next(g.code(a.value) for a in call.args if a.star == "**")
            return (
                f"{name} comes from {owner.name.value}.{dest}, which {owner.name.value}"  # type: ignore[attr-defined]
                f"(**{held}) at {where} may set{config_file(files)}: make it {value!r} there"
            )
    if assign.value is None or not is_literal(assign.value):
        return f"{name} comes from {owner.name.value}.{dest}, whose default is not a constant: make it {value!r}"  # type: ignore[attr-defined]
    old = f.code(assign.value)
    if old != repr(value):
        f.plan(remedy.key, assign, set_value(literal(value)))
        remedy.changes.append(
            Change(
                f.path,
                f.line_of(assign),
                f"default of {owner.name.value}.{dest}: {old} → {value!r} ({name})",  # type: ignore[attr-defined]
            )
        )
    return None


def _declares(stmt: cst.CSTNode, field: str) -> bool:
    """A class body's ``field: T = v`` or ``field = v``."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    node = stmt.body[0]
    if isinstance(node, cst.AnnAssign):
        return isinstance(node.target, cst.Name) and node.target.value == field
    return (
        isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0].target, cst.Name)
        and node.targets[0].target.value == field
    )


def config_file(files: list[SourceFile]) -> str:
    """`` (from train.yaml, named at train.py:12)`` where the files spell a config file's name,
    `` (from a config file the script reads with yaml)`` where they import a reader; else ""."""
    for f in files:
        for string in f.nodes(cst.SimpleString):
            match = _CONFIG_FILE.fullmatch(f.code(string))
            if match:
                return f" (from {match.group(1)}, named at {f.path.name}:{f.line_of(string)})"
    for f in files:
        for imported in f.nodes(cst.Import):
            for alias in imported.names:  # type: ignore[attr-defined]
                head = (dotted(alias.name) or "").split(".")[0]
                if head in _CONFIG_READERS:
                    return f" (from a config file the script reads with {head})"
    return ""
