"""DataLoader settings passed in ``**kwargs``: followed to the dict literal they are written in.

pytorch/examples builds its loaders as ``DataLoader(dataset1, **train_kwargs)`` from
``train_kwargs = {'batch_size': args.batch_size}`` and, on an accelerator,
``train_kwargs.update(accel_kwargs)`` with ``accel_kwargs = {'num_workers': 1, ...}``. A setting
is written where the run's value came from:

- the one literal entry for it that holds the value the run's loader had (in the dict itself or
  in a dict an ``update`` merges into it) is changed there;
- with no entry the run took (none at all, or only in an update whose branch did not run: its
  value is not the run's), ``'name': value`` is added to the dict itself, and an entry the run
  did not take is named beside the change (it still applies where its update runs).

A name assigned ``{...} if use_accel else {}`` (vae's, mnist_rnn's ``kwargs``) is the branch
whose entries hold the run's values, the other named beside the change.

Anything else is left out with the reason: the name assigned more than once or to something
other than a dict literal, a ``**`` or a computed key inside a dict, an update from a computed
value, an item assignment (``kwargs['num_workers'] = ...``), a computed value, two entries the
run could have taken. Torch-free.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

import libcst as cst

from ._edits import (
    WORKER_ONLY,
    Change,
    Skipped,
    SourceFile,
    assignments,
    is_literal,
    literal,
    parameter_names,
    set_value,
)
from ._project import Project, also_read, reads_of


def plan_in_kwargs(
    project: Project,
    source: SourceFile,
    holder: cst.Arg,
    settings: Mapping[str, object],
    current: Mapping[str, object] | None,
    remedy,
) -> None:
    """Each of ``settings`` (not among the call's own arguments) where the ``**`` argument
    ``holder`` of the call gets it; each one that cannot be, in ``remedy.skipped``.
    ``current``: the run's loader settings (``None``: not known, every entry may be the run's)."""
    held = source.code(holder.value).strip()
    dicts, reason = _dicts(source, holder.value, current)
    additions: list[tuple[str, object]] = []
    base = holder.value.value if isinstance(holder.value, cst.Name) else ""
    merging = _method_call_lines(source, base)

    def also(label: str) -> str:
        """Where else the dict ``label`` is read (another DataLoader given it changes too)."""
        name = label.removeprefix("the other branch of ")
        if not name.isidentifier():
            return ""
        skip = {source.line_of(holder.value), *merging}
        skip |= {source.line_of(a) for a in assignments(source, name)}
        return also_read(reads_of(project, source, cst.Name, name, skip))

    for name, value in settings.items():
        if name in WORKER_ONLY and any(s.setting == "num_workers" for s in remedy.skipped):
            reason_here = "it needs the workers, whose setting is left out: add it with them"
        elif reason:
            reason_here = reason
        else:
            reason_here = _plan_entry(
                source, dicts, name, name, value, current, remedy, additions, also
            )
        if reason_here:
            remedy.skipped.append(
                Skipped(
                    name, f"the call passes **{held}: {reason_here}; set {name}={value!r} there"
                )
            )
    if additions:
        keys = [el.key for _, d in dicts for el in d.elements if isinstance(el, cst.DictElement)]
        quoted = [k.quote for k in keys if isinstance(k, cst.SimpleString) and len(k.quote) == 1]
        source.plan(remedy.key, dicts[0][1], add_entries(additions, quoted[0] if quoted else '"'))


def worker_only_held(
    source: SourceFile, holder: cst.Arg, current: Mapping[str, object] | None
) -> str:
    """Why ``num_workers=0`` cannot be written beside ``**holder``: its dicts hold a setting that
    needs workers, or cannot be followed (they may); ``""`` when they hold none."""
    dicts, reason = _dicts(source, holder.value, current)
    if reason:
        return f"{reason}, and it may hold settings that need workers"
    held = _worker_only(dicts)
    return f"its {held[0]} needs workers" if held else ""


def _worker_only(dicts: list[tuple[str, cst.Dict]]) -> list[str]:
    """The settings that need workers the dicts hold."""
    return [k for _, d in dicts for el in d.elements if (k := _key(el)) in WORKER_ONLY]


def plan_config_entry(
    source: SourceFile,
    expr: cst.Subscript,
    name: str,
    value: object,
    current: Mapping[str, object] | None,
    remedy,
) -> str | None:
    """``num_workers=config['workers']``: the entry of the dict literal ``config`` is assigned
    once (and of the dicts its ``update`` calls merge in) that the run took, changed; the reason
    when there is none to change. ``None``: not such a subscript."""
    elements = expr.slice
    index = elements[0].slice if len(elements) == 1 else None
    if not (
        isinstance(expr.value, cst.Name)
        and isinstance(index, cst.Index)
        and isinstance(index.value, cst.SimpleString)
    ):
        return None
    key = index.value.evaluated_value
    dicts, reason = _dicts(source, expr.value, current)
    if not reason:
        reason = _plan_entry(source, dicts, str(key), name, value, current, remedy, None)
    variable = expr.value.value
    return f"{name} comes from {variable}[{key!r}]: {reason}; make it {value!r}" if reason else ""


def _plan_entry(
    source: SourceFile,
    dicts: list[tuple[str, cst.Dict]],
    key: str,
    name: str,
    value: object,
    current: Mapping[str, object] | None,
    remedy,
    additions: list[tuple[str, object]] | None,
    also: Callable[[str], str] = lambda label: "",
) -> str:
    """One setting ``name``, under ``key`` in the dicts: its entry changed, or added to the base
    dict (``additions``; ``None``: it cannot be, the key must be there); the reason when not.
    ``also(label)``: the other places the dict named ``label`` is read, said beside a change."""
    entries = [(label, el) for label, d in dicts for el in d.elements if _key(el) == key]
    if any(not is_literal(el.value) for _, el in entries):
        label = next(lb for lb, el in entries if not is_literal(el.value))
        return f"{label} computes it"
    if name == "num_workers" and value == 0:
        worker_only = _worker_only(dicts)
        if worker_only:
            return f"{worker_only[0]} there needs workers"
    taken = [
        (label, el)
        for label, el in entries
        if current is None or name not in current or _value(el) == current[name]
    ]
    if len(taken) > 1:
        return "it is set at " + " and ".join(
            f"{lb} (line {source.line_of(el)})" for lb, el in taken
        )
    not_taken = [
        f"{lb} at line {source.line_of(el)} sets it to {source.code(el.value).strip()}, which "
        "this run did not take"
        for lb, el in entries
        if (lb, el) not in taken
    ]
    note = f" ({'; '.join(not_taken)})" if not_taken else ""
    if taken:
        label, el = taken[0]
        old = source.code(el.value).strip()
        if old != repr(value):
            source.plan(remedy.key, el, set_value(literal(value)))
            said = f"{label}[{key!r}] = {old} → {value!r}" + (f" ({name})" if key != name else "")
            said += also(label)
            remedy.changes.append(Change(source.path, source.line_of(el), said))
        return ""
    if additions is None:
        return f"no entry {key!r} the run took{note}"
    label, base = dicts[0]
    if any(el is held for _, el in entries for held in base.elements):
        return f"{label} holds it with another value than the run's: something else changes it"
    additions.append((name, value))
    remedy.changes.append(
        Change(
            source.path,
            source.line_of(base),
            f"{label}[{name!r}] = {value!r} added{note}" + also(label),
        )
    )
    return ""


def _dicts(
    source: SourceFile, expr: cst.BaseExpression, current: Mapping[str, object] | None
) -> tuple[list[tuple[str, cst.Dict]], str]:
    """The dict literal ``expr`` names where it is read, and the dict literals its ``update``
    calls before that read merge into it, each with its name; the reason when they cannot be
    followed. Names are taken in the read's scope: a parameter of its function is its callers'
    (refused), an assignment in another function is another variable (not followed)."""
    if not isinstance(expr, cst.Name):
        return [], "it is computed"
    variable, line = expr.value, source.line_of(expr)
    scope = _scope(source, line)
    if scope is not None and variable in parameter_names(scope):
        return [], f"{variable} is a parameter of {scope.name.value}(), set by its callers"
    branches = _dict_assigned(source, variable, current, scope)
    if not branches:
        return [], f"{variable} is not assigned one dict literal in {source.path.name}"
    dicts = [(variable, branches[0])]
    dicts += [(f"the other branch of {variable}", other) for other in branches[1:]]
    for node in _in_scope(source, cst.Call, scope, line):
        func = node.func  # type: ignore[attr-defined]
        if (
            not (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value == variable
            )
            or func.attr.value in _READS
        ):
            continue
        args = node.args  # type: ignore[attr-defined]
        merged = args[0].value if len(args) == 1 and not args[0].keyword else None
        if func.attr.value != "update" or merged is None:
            return (
                [],
                f"{variable}.{func.attr.value}(...) at line {source.line_of(node)} changes it",
            )
        if isinstance(merged, cst.Name):
            found = next(iter(_dict_assigned(source, merged.value, current, scope)), None)
            label = merged.value
        else:
            found, label = (merged if isinstance(merged, cst.Dict) else None), f"{variable}.update"
        if found is None:
            return [], f"{variable} is updated from {source.code(merged).strip()}, computed"
        dicts.append((label, found))
    written = [t.target for a in source.nodes(cst.Assign) for t in a.targets]  # type: ignore[attr-defined]
    written += [t for d in source.nodes(cst.Del) for t in _deleted(d)]  # type: ignore[arg-type]
    for node in written:
        if (
            isinstance(node, cst.Subscript)
            and isinstance(node.value, cst.Name)
            and node.value.value == variable
        ):
            return [], f"{variable}[...] at line {source.line_of(node)} may set it"
    for node in source.nodes(cst.AugAssign):
        if isinstance(node.target, cst.Name) and node.target.value == variable:  # type: ignore[attr-defined]
            return [], f"{variable} is changed in place at line {source.line_of(node)}"
    for _, d in dicts:
        for el in d.elements:
            if isinstance(el, cst.StarredDictElement) or _key(el) is None:
                return [], f"a dict at line {source.line_of(d)} holds {source.code(el).strip(', ')}"
    return dicts, ""


#: Methods of a dict that read it: any other call on it may change it.
_READS = frozenset({"get", "copy", "keys", "items", "values", "__getitem__"})


def _deleted(node: cst.Del) -> list[cst.BaseExpression]:
    """What ``del`` deletes: ``del kw['a']``, ``del kw['a'], kw['b']``."""
    target = node.target
    if isinstance(target, cst.Tuple):
        return [e.value for e in target.elements]
    return [target]


def _scope(source: SourceFile, line: int) -> cst.FunctionDef | None:
    """The innermost function whose body holds ``line`` (``None``: the module's level)."""
    spans = [f for f in source.nodes(cst.FunctionDef) if source.spans(f, line)]
    return max(spans, key=source.line_of, default=None)  # type: ignore[return-value]


def _in_scope(
    source: SourceFile, node_type: type, scope: cst.FunctionDef | None, before: int
) -> list[cst.CSTNode]:
    """Nodes of ``node_type`` in ``scope`` (or the module's level) written before line
    ``before``: what ran before the read, as far as the text tells."""
    return [
        n
        for n in source.nodes(node_type)
        if source.line_of(n) < before and _scope(source, source.line_of(n)) in (scope, None)
    ]


def _method_call_lines(source: SourceFile, variable: str) -> set[int]:
    """The lines of ``variable.<method>(...)`` calls (its updates: not other readers of it)."""
    return {
        source.line_of(node)
        for node in source.nodes(cst.Call)
        if isinstance(func := node.func, cst.Attribute)  # type: ignore[attr-defined]
        and isinstance(func.value, cst.Name)
        and func.value.value == variable
    }


def _dict_assigned(
    source: SourceFile,
    variable: str,
    current: Mapping[str, object] | None,
    scope: cst.FunctionDef | None = None,
) -> list[cst.Dict]:
    """The dict literal ``variable`` is assigned once; of ``{...} if cond else {...}`` (vae's and
    mnist_rnn's ``kwargs``), the branch the run took first (the one whose entries hold the run's
    values), then the other. Empty when there is no such literal, or no telling the branches."""
    assigns = [
        a for a in assignments(source, variable) if _scope(source, source.line_of(a)) is scope
    ]
    if not assigns and scope is not None:  # not assigned in the function: the module's
        assigns = [
            a for a in assignments(source, variable) if _scope(source, source.line_of(a)) is None
        ]
    value = assigns[0].value if len(assigns) == 1 else None
    if isinstance(value, cst.Dict):
        return [value]
    if not (
        isinstance(value, cst.IfExp)
        and isinstance(value.body, cst.Dict)
        and isinstance(value.orelse, cst.Dict)
        and current is not None
    ):
        return []
    taken = [d for d in (value.body, value.orelse) if _consistent(d, current)]
    if len(taken) != 1:
        return []
    other = value.orelse if taken[0] is value.body else value.body
    return [taken[0], other]


#: The DataLoader's own defaults of the settings a run reports: a branch without an entry for
#: one gives the default.
_DEFAULTS = {"num_workers": 0, "pin_memory": False, "persistent_workers": False}


def _consistent(d: cst.Dict, current: Mapping[str, object]) -> bool:
    """Whether ``d`` gives every setting the run reports the run's value (its entry, else the
    DataLoader's default)."""
    given = {_key(el): el for el in d.elements if isinstance(el, cst.DictElement)}
    return all(
        (_value(given[key]) if key in given else default) == current[key]
        for key, default in _DEFAULTS.items()
        if key in current
    )


def _key(el: cst.BaseDictElement) -> str | None:
    if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
        key = el.key.evaluated_value
        return key if isinstance(key, str) else None
    return None


def _value(el: cst.DictElement) -> object:
    try:
        return ast.literal_eval(cst.Module([]).code_for_node(el.value))
    except (ValueError, SyntaxError):
        return object()


def add_entries(names_values: list[tuple[str, object]], quote: str = '"'):
    """An edit of a dict literal: ``'name': value`` entries appended, their keys in ``quote``
    (the script's dicts' own), in its own layout (one per line in a dict written one entry per
    line)."""

    def apply(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Dict)
        elements = list(node.elements)
        new = [
            cst.DictElement(
                key=cst.SimpleString(f"{quote}{n}{quote}"),
                value=literal(v),
                whitespace_after_colon=cst.SimpleWhitespace(" "),
            )
            for n, v in names_values
        ]
        between = (
            _bare(elements[-2].comma)
            if len(elements) >= 2 and isinstance(elements[-2].comma, cst.Comma)
            else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        last = elements[-1].comma if elements else cst.MaybeSentinel.DEFAULT
        trailing: cst.Comma | cst.MaybeSentinel = cst.MaybeSentinel.DEFAULT
        rbrace = node.rbrace
        if isinstance(last, cst.Comma):  # a trailing comma: the new entries keep one last
            trailing = _bare(last)
            after, step = last.whitespace_after, between.whitespace_after
            closing = rbrace.whitespace_before
            if not isinstance(step, cst.ParenthesizedWhitespace):
                last = between
            elif isinstance(after, cst.ParenthesizedWhitespace):
                # its comment stays on its line; the next entry starts where entries do
                last = last.with_changes(
                    whitespace_after=after.with_changes(
                        indent=step.indent, last_line=step.last_line
                    )
                )
            elif isinstance(closing, cst.ParenthesizedWhitespace):
                # the last entry's comment is held by the closing brace: it moves to the entry
                last = last.with_changes(
                    whitespace_after=closing.with_changes(
                        indent=step.indent, last_line=step.last_line
                    )
                )
                rbrace = rbrace.with_changes(
                    whitespace_before=closing.with_changes(
                        first_line=cst.TrailingWhitespace(), empty_lines=[]
                    )
                )
            elements[-1] = elements[-1].with_changes(comma=last)
        elif elements:
            elements[-1] = elements[-1].with_changes(comma=between)
        new = [e.with_changes(comma=between) for e in new[:-1]] + [
            new[-1].with_changes(comma=trailing)
        ]
        return node.with_changes(elements=[*elements, *new], rbrace=rbrace)

    return apply


def _bare(comma: cst.Comma) -> cst.Comma:
    """``comma`` without the comment it carries to the end of its line (a new entry's comma: a
    comment belongs to the entry it was written beside)."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace):
        return comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
        )
    return comma
