"""Each measured remedy planned as edits at the place in the user's code where its setting lives.

- **DataLoader settings** (``num_workers``, ``pin_memory``, ``persistent_workers``,
  ``prefetch_factor``, from the worker sweep): at the ``DataLoader(...)`` call the run saw build
  the measured loader. A literal argument is replaced; a missing one is added; one passed as a
  variable is changed where the variable is assigned (one plain assignment in that file); one
  read from ``argparse`` (``args.workers``) is changed at its ``add_argument(..., default=...)``.
- **Threads** (``torch.set_num_threads``, from the sweep's pick): the script's own call is
  changed, or one is added after its imports.

A setting the call passes in ``**kwargs`` is followed to the dict literal it is written in
(``patch._kwargs``). Whatever cannot be changed safely (a value computed at run time, ``*args``
or ``**kwargs`` that cannot be followed, an option the command line sets, a file of an installed
package) is left out, with the reason. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ..record.lever_names import FOREACH, LEVERS
from ._edits import (
    DATALOADER_POSITIONAL,
    WORKER_ONLY,
    Change,
    PatchError,
    Skipped,
    SourceFile,
    add_keywords,
    assignments,
    callee_name,
    chain,
    dotted,
    is_literal,
    keyword,
    literal,
    parameter_names,
    remove_keywords,
    set_value,
)
from ._followed import NOT_DECLARED, config_file, field_default, loader_partial
from ._kwargs import plan_config_entry, plan_in_kwargs, worker_only_held
from ._project import Project, also_read, reads_of

#: Remedy keys, in the order they are planned and reported.
LOADER, THREADS, OPTIMIZER = "loader", "threads", "optimizer"
#: The sweep's joint pick: workers and the main process's threads, measured together.
LOADER_AND_THREADS = "loader+threads"
TITLES = {
    LOADER: "DataLoader settings",
    LOADER_AND_THREADS: "DataLoader settings and torch threads",
    THREADS: "torch threads",
    OPTIMIZER: LEVERS[FOREACH].title,
}


@dataclass
class Remedy:
    """One measured remedy: its changes (empty when every setting was left out) and what was
    left out, with why."""

    key: str
    #: What the diagnosis measured that asks for it, in words.
    because: str
    changes: list[Change] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    #: Its name in the report (``TITLES[key]`` unless given).
    title: str = ""
    #: Judged by the losses it computes, not by its speed: a rewrite whose gain cannot show on a
    #: CPU (a host round-trip costs nothing there).
    numerics: bool = False
    #: What else the remedy changes, said beside it (AMP: the numerics).
    caveat: str = ""
    #: A rewrite's finding, as ``(kind, file, line)``: the sync finder checks it is gone.
    finding: tuple[str, str, int] | None = None

    def __post_init__(self) -> None:
        self.title = self.title or TITLES.get(self.key, self.key)


def plan_loader(
    project: Project,
    where: str,
    settings: Mapping[str, object],
    argv: Sequence[str],
    because: str,
    current: Mapping[str, object] | None = None,
) -> Remedy:
    """Plan the DataLoader arguments ``settings`` at the call at ``where`` (``file:line``);
    ``current``: the run's loader settings, which tell the entry of a ``**kwargs`` dict the run
    took from those it did not (``patch._kwargs``)."""
    remedy = Remedy(LOADER, because)
    file, _, line = where.rpartition(":")
    source = project.patchable(Path(file), "DataLoader", remedy.skipped)
    if source is None:
        return remedy  # the reason is in remedy.skipped
    made = loader_partial(source, int(line)) if line.isdigit() else None
    if made is not None:  # functools.partial(DataLoader, ...)
        site, partial = made
        given = {k: v for k, v in settings.items() if keyword(site, k) is not None}
        if given:  # the call's own keywords win over the partial's
            _plan_call(project, source, site, given, argv, remedy, parameters=(), current=current)
        rest = {k: v for k, v in settings.items() if k not in given}
        loader = ("DataLoader", *DATALOADER_POSITIONAL)  # the partial's first argument
        _plan_call(project, source, partial, rest, argv, remedy, loader, current=current)
        return remedy
    found = _call_at(
        project,
        where,
        remedy,
        "DataLoader",
        lambda name: name.endswith("DataLoader"),
        " (a subclass or a factory builds it): set the arguments where it is built",
    )
    if found is not None:
        _plan_call(project, *found, dict(settings), argv, remedy, current=current)
    return remedy


def plan_optimizer(
    project: Project, where: str, optimizer: str, flag: str, argv: Sequence[str], because: str
) -> Remedy:
    """``fused=True`` (or ``foreach=True``) at the ``torch.optim.<optimizer>(...)`` call at
    ``where`` (``file:line``), where the script built its optimizer."""
    remedy = Remedy(OPTIMIZER, because)
    found = _call_at(project, where, remedy, optimizer, lambda name: name == optimizer, "")
    if found is not None:
        _plan_call(project, *found, {flag: True}, argv, remedy, parameters=())
    return remedy


def _call_at(
    project: Project, where: str, remedy: Remedy, callee: str, named, why_missing: str
) -> tuple[SourceFile, cst.Call] | None:
    """The file at ``where`` (``file:line``) and the innermost call there whose callee's name
    satisfies ``named``; ``None`` with the reason in ``remedy.skipped`` (``why_missing`` added to
    it when there is no such call)."""
    file, _, line_text = where.rpartition(":")
    path, line = Path(file), int(line_text) if line_text.isdigit() else 0
    source = project.patchable(path, callee, remedy.skipped)
    if source is None:
        return None
    call = _named_call(source, line, named)
    if call is None:
        remedy.skipped.append(
            Skipped(callee, f"no {callee}(...) call at {project.rel(path)}:{line}{why_missing}")
        )
        return None
    return source, call


def _named_call(source: SourceFile, line: int, named) -> cst.Call | None:
    """The innermost call written over ``line`` whose callee's name satisfies ``named``."""
    calls = [c for c in source.nodes(cst.Call) if source.spans(c, line) and named(callee_name(c))]
    if not calls:
        return None
    return max(calls, key=lambda c: (source.line_of(c), source.positions[c].start.column))


def _plan_call(
    project: Project,
    source: SourceFile,
    call: cst.Call,
    settings: dict[str, object],
    argv: Sequence[str],
    remedy: Remedy,
    parameters: Sequence[str] = DATALOADER_POSITIONAL,
    current: Mapping[str, object] | None = None,
) -> None:
    """Each of ``settings`` at ``call`` (``parameters``: the callee's positional parameters)."""
    where = source.line_of(call)
    removals = []
    star_kwargs = next((a for a in call.args if a.star == "**"), None)
    if settings.get("num_workers") == 0 and star_kwargs is not None:
        why = worker_only_held(source, star_kwargs, current)
        if why:  # without workers the DataLoader would reject what the dict passes
            held = source.code(star_kwargs.value).strip()
            settings.pop("num_workers")
            remedy.skipped.append(
                Skipped("num_workers", f"the call passes **{held}: {why}; set num_workers=0 there")
            )
    if settings.get("num_workers") == 0:
        # Without workers the DataLoader rejects the worker-only arguments: they go.
        for name in WORKER_ONLY:
            settings.pop(name, None)
            if keyword(call, name) is not None:
                removals.append(name)
                remedy.changes.append(Change(source.path, where, f"{name} removed (no workers)"))
    positional = [a for a in call.args if a.keyword is None and not a.star]
    star_args = next((a for a in call.args if a.star == "*"), None)
    additions: list[tuple[str, object]] = []
    in_kwargs: dict[str, object] = {}
    ordered = sorted(settings.items(), key=lambda item: item[0] != "num_workers")
    for name, value in ordered:
        if name in WORKER_ONLY and any(s.setting == "num_workers" for s in remedy.skipped):
            remedy.skipped.append(
                Skipped(
                    name,
                    f"it needs the workers, whose setting is left out: add {name}={value!r} with them",
                )
            )
            continue
        arg = keyword(call, name)
        index = parameters.index(name) if name in parameters else None
        if arg is None and index is not None and index < len(positional):
            arg = positional[index]
        if arg is None:
            # a positional setting may sit in *args, any setting in **kwargs
            holder = (star_args if index is not None else None) or star_kwargs
            if holder is star_kwargs and holder is not None:
                in_kwargs[name] = value  # followed to the dict it is written in, below
                continue
            if holder is not None:
                remedy.skipped.append(
                    Skipped(
                        name,
                        f"the call at {project.rel(source.path)}:{where} passes "
                        f"{source.code(holder).strip(', ')}, which may hold it: set "
                        f"{name}={value!r} there",
                    )
                )
                continue
            additions.append((name, value))
            remedy.changes.append(Change(source.path, where, f"{name}={value!r} added"))
            continue
        _plan_value(project, source, arg, name, value, argv, remedy, current)
    if removals or additions:
        source.plan(remedy.key, call, chain(remove_keywords(removals), add_keywords(additions)))
    if in_kwargs and star_kwargs is not None:
        plan_in_kwargs(project, source, star_kwargs, in_kwargs, current, remedy)


def _plan_value(
    project: Project,
    source: SourceFile,
    arg: cst.Arg,
    name: str,
    value: object,
    argv: Sequence[str],
    remedy: Remedy,
    current: Mapping[str, object] | None = None,
) -> None:
    """A setting the call passes: changed where its value is written."""
    expr = arg.value
    old = source.code(expr)
    if is_literal(expr):
        if old != repr(value):
            source.plan(remedy.key, arg, set_value(literal(value)))
            remedy.changes.append(
                Change(source.path, source.line_of(arg), f"{name}={old} → {value!r}")
            )
        return
    if isinstance(expr, cst.Name):
        reason = _plan_variable(project, source, arg, expr.value, name, value, remedy)
    elif (
        isinstance(expr, cst.Subscript)
        and (reason := plan_config_entry(source, expr, name, value, current, remedy)) is not None
    ):
        pass  # a config dict's entry: changed, or why not
    elif isinstance(expr, cst.Attribute) and dotted(expr) is not None:
        reason = _plan_option(
            project, source, expr.attr.value, name, value, argv, remedy, source.line_of(arg)
        )
    else:
        reason = f"{name} is computed ({old}): make it {value!r}"
    if reason:
        remedy.skipped.append(Skipped(name, reason))


def _plan_variable(
    project: Project,
    source: SourceFile,
    arg: cst.Arg,
    variable: str,
    name: str,
    value: object,
    remedy: Remedy,
) -> str | None:
    """``num_workers=workers``: the one plain assignment of ``workers`` changed, in the file or
    in the project's module it is imported from (``from config import WORKERS``)."""
    for func in source.nodes(cst.FunctionDef):
        if source.spans(func, source.line_of(arg)):
            if variable in parameter_names(func):
                return (
                    f"{name} comes from the parameter {variable!r} of {func.name.value}(), "
                    f"set by its callers: pass {value!r} there"
                )
    call_source, call_variable, call_line = source, variable, source.line_of(arg)
    assigns = assignments(source, variable)
    if not assigns:
        imported = _imported_from(project, source, variable)
        if imported is not None:
            source, variable = imported
            assigns = assignments(source, variable)
    if len(assigns) != 1 or assigns[0].value is None or not is_literal(assigns[0].value):
        how = "assigned more than once" if len(assigns) > 1 else "not assigned a constant"
        return f"{name} comes from {variable!r}, {how} in {source.path.name}: make it {value!r}"
    assign = assigns[0]
    old = source.code(assign.value)
    if old != repr(value):
        source.plan(remedy.key, assign, set_value(literal(value)))
        uses = reads_of(project, source, cst.Name, variable, {source.line_of(assign)})
        if call_source is not source:
            uses += reads_of(project, call_source, cst.Name, call_variable, set())
        uses = [u for u in uses if u != f"{project.rel(call_source.path)}:{call_line}"]
        remedy.changes.append(
            Change(
                source.path,
                source.line_of(assign),
                f"{variable} = {old} → {value!r} ({name})" + also_read(uses),
            )
        )
    return None


def _imported_from(
    project: Project, source: SourceFile, variable: str
) -> tuple[SourceFile, str] | None:
    """The project's file and name ``variable`` is imported from (``from .config import W``)."""
    for node in source.nodes(cst.ImportFrom):
        if isinstance(node.names, cst.ImportStar):
            continue
        for alias in node.names:
            bound = alias.asname.name.value if alias.asname else dotted(alias.name)  # type: ignore[union-attr]
            if bound != variable:
                continue
            module = (dotted(node.module) or "") if node.module else ""
            level = len(node.relative)
            bases = (
                [source.path.parents[level - 1]]
                if level
                else [source.path.parent, project.script.parent, project.root]
            )
            for base in bases:
                stem = base.joinpath(*module.split(".")) if module else base
                for path in (stem.with_suffix(".py"), stem / "__init__.py"):
                    if path.is_file() and project.refuses(path) is None:
                        try:
                            return project.source(path), str(dotted(alias.name))
                        except PatchError:
                            return None
    return None


def _plan_option(
    project: Project,
    source: SourceFile,
    dest: str,
    name: str,
    value: object,
    argv: Sequence[str],
    remedy: Remedy,
    line: int,
) -> str | None:
    """``num_workers=args.workers``: the ``add_argument`` default of ``--workers`` changed
    (``line``: where the call reads it)."""
    files = [source]
    if project.refuses(project.script) is None and project.script != source.path:
        try:
            files.append(project.source(project.script))
        except PatchError:
            pass
    for f in files:
        for call in f.nodes(cst.Call):
            if callee_name(call) != "add_argument" or _dest(call) != dest:
                continue
            options = [_string(a.value) for a in call.args if a.keyword is None]
            flags = sorted((o for o in options if o and o.startswith("-")), key=_long_first)
            given = [a for a in argv if any(a == o or a.startswith(o + "=") for o in flags)]
            if given:
                return f"your command line sets {given[0].split('=')[0]}: run with {flags[0]} {value!r}"
            default = keyword(call, "default")
            if default is None or not is_literal(default.value):
                return (
                    f"{name} comes from the option {flags[0] if flags else dest}, whose default "
                    f"is not a constant: make it {value!r}"
                )
            old = f.code(default.value)
            if old != repr(value):
                f.plan(remedy.key, default, set_value(literal(value)))
                uses = [
                    u
                    for g in ([f] if f is source else [f, source])
                    for u in reads_of(project, g, cst.Attribute, dest, set())
                    if u != f"{project.rel(source.path)}:{line}"
                ]
                remedy.changes.append(
                    Change(
                        f.path,
                        f.line_of(default),
                        f"default of {flags[0] if flags else dest}: {old} → {value!r} ({name})"
                        + also_read(uses),
                    )
                )
            return None
    declared = field_default(files, dest, name, value, remedy)
    if declared != NOT_DECLARED:
        return declared
    return (
        f"{name} comes from {dest!r}, which the patcher cannot trace to a constant"
        f"{config_file(files)}: make it {value!r}"
    )


def _long_first(flag: str) -> int:
    return 0 if flag.startswith("--") else 1


def _dest(call: cst.Call) -> str | None:
    """The attribute an ``add_argument`` call stores into."""
    explicit = keyword(call, "dest")
    if explicit is not None:
        return _string(explicit.value)
    names = [_string(a.value) for a in call.args if a.keyword is None]
    names = [n for n in names if n]
    longs = [n for n in names if n.startswith("--")]
    if longs:
        return longs[0][2:].replace("-", "_")
    shorts = [n for n in names if n.startswith("-")]
    if shorts:
        return shorts[0][1:].replace("-", "_")
    return names[0] if names else None


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None
