"""Edits of the user's source, on its concrete syntax tree (libcst): formatting and comments stay.

An edit is planned against the file as it is (:class:`SourceFile`), keyed by the position of the
node it changes, so the edits of several remedies compose: :meth:`SourceFile.render` applies any
subset of them in one pass. A setting that cannot be changed safely where it lives is not edited:
it becomes a :class:`Skipped` with the reason, and the report says it.

Torch-free: this runs in the parent process, on text.
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ._comments import stale_comments_dropped

#: ``DataLoader``'s positional parameters, in order (a setting passed positionally is edited
#: there: a keyword for it would collide).
DATALOADER_POSITIONAL = (
    "dataset",
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
)
#: Arguments the DataLoader accepts only with workers: dropped when the fix sets 0 workers.
WORKER_ONLY = ("persistent_workers", "prefetch_factor")


class PatchError(Exception):
    """A file the patcher cannot read or parse (the message names it and why)."""


@dataclass(frozen=True)
class Change:
    """One change, at a line of the original file."""

    file: Path
    line: int
    #: In words: ``num_workers=0 → 4``.
    what: str


@dataclass(frozen=True)
class Skipped:
    """A setting left out of the patch, with the reason."""

    setting: str
    reason: str


@dataclass
class _Edit:
    remedy: str
    node_type: type
    line: int
    column: int
    apply: Callable[[cst.CSTNode], cst.CSTNode]
    #: Moves or surrounds the node (a ``with`` block around it, a statement added after it):
    #: applied after the edits that change the node itself, to the node they made.
    wraps: bool = False


@dataclass
class SourceFile:
    """One of the user's files, parsed once, with the edits planned on it.

    Read as Python reads it: in the encoding its PEP 263 cookie or BOM names (UTF-8 without
    one), its line endings kept as they are (libcst keeps them, and writes the lines it adds with
    the file's own), so a patched file differs from the original only on the lines it changes.
    """

    path: Path
    text: str
    module: cst.Module
    wrapper: MetadataWrapper
    positions: dict
    edits: list[_Edit] = field(default_factory=list)
    #: The codec that turns ``text`` back into the file's bytes (``utf-8-sig`` keeps a BOM).
    encoding: str = "utf-8"

    @classmethod
    def read(cls, path: Path) -> SourceFile:
        try:
            data = path.read_bytes()
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
            text = data.decode(encoding)  # no newline translation: CRLF stays CRLF
        except (OSError, SyntaxError, UnicodeDecodeError) as exc:
            raise PatchError(f"{path}: cannot be read ({exc})") from None
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            raise PatchError(
                f"{path}: cannot be parsed ({_python_says(text, path, exc)})"
            ) from None
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        return cls(path, text, module, wrapper, positions, encoding=encoding)

    def encoded(self, text: str) -> bytes:
        """``text`` (this file, or its patched version) as the file's bytes."""
        return text.encode(self.encoding)

    # --- finding nodes -------------------------------------------------------------------------

    def nodes(self, node_type: type) -> list[cst.CSTNode]:
        """Every node of ``node_type``, in source order."""
        found = [n for n in self.positions if isinstance(n, node_type)]
        return sorted(found, key=lambda n: (self.line_of(n), self.positions[n].start.column))

    def line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def spans(self, node: cst.CSTNode, line: int) -> bool:
        pos = self.positions[node]
        return pos.start.line <= line <= pos.end.line

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # --- planning and applying -----------------------------------------------------------------

    def plan(
        self,
        remedy: str,
        node: cst.CSTNode,
        apply: Callable[[cst.CSTNode], Any],
        wraps: bool = False,
    ) -> None:
        """Change ``node`` with ``apply`` when ``remedy`` is part of the rendered patch.
        ``apply`` is given the node as the other edits left it; with ``wraps`` it may return a
        ``FlattenSentinel`` (statements added around it) or ``RemovalSentinel`` (it moves)."""
        pos = self.positions[node]
        self.edits.append(_Edit(remedy, type(node), pos.start.line, pos.start.column, apply, wraps))

    def remedies(self) -> set[str]:
        return {e.remedy for e in self.edits}

    def rekey(self, old: str, new: str) -> None:
        """The edits planned for remedy ``old`` belong to ``new`` (two remedies made one)."""
        for edit in self.edits:
            if edit.remedy == old:
                edit.remedy = new

    def render(self, remedies: Iterable[str]) -> str:
        """The file with the edits of ``remedies`` applied (the text itself when there are none)."""
        return self.rendered(remedies)[0]

    def rendered(self, remedies: Iterable[str]) -> tuple[str, list[tuple[int, str]]]:
        """:meth:`render`'s text, and the trailing comments its changes made untrue, left out
        (``(line, comment)``: :mod:`._comments`)."""
        chosen = set(remedies)
        edits = [e for e in self.edits if e.remedy in chosen]
        if not edits:
            return self.text, []
        return stale_comments_dropped(self.text, self.wrapper.visit(_Applier(edits)).code)


def _python_says(text: str, path: Path, exc: Exception) -> str:
    """Python's own message for a file libcst cannot parse (its line is the one Python names)."""
    try:
        compile(text, str(path), "exec", dont_inherit=True)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    except ValueError as error:  # null bytes
        return str(error)
    first = str(exc).strip().splitlines()
    return first[0] if first else "syntax error"


class _Applier(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, edits: Sequence[_Edit]) -> None:
        super().__init__()
        self._edits = sorted(edits, key=lambda e: e.wraps)  # stable: planned order otherwise

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        try:
            pos = self.get_metadata(PositionProvider, original_node)
        except KeyError:
            return updated_node
        for edit in self._edits:
            if (
                isinstance(original_node, edit.node_type)
                and type(original_node) is edit.node_type
                and (pos.start.line, pos.start.column) == (edit.line, edit.column)
            ):
                updated_node = edit.apply(updated_node)
        return updated_node


# --- expressions -------------------------------------------------------------------------------


def literal(value: object) -> cst.BaseExpression:
    """The expression of a plain value (``4``, ``True``, ``None``)."""
    return cst.parse_expression(repr(value))


def is_literal(node: cst.BaseExpression) -> bool:
    """A constant the patch may replace: a number, a string, ``True``/``False``/``None``."""
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return isinstance(node.expression, (cst.Integer, cst.Float))
    return False


def callee_name(call: cst.Call) -> str:
    """The called name's last part: ``DataLoader`` for ``torch.utils.data.DataLoader(...)``."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return ""


def parameter_names(func: cst.FunctionDef) -> list[str]:
    """The names of ``func``'s parameters, in order (positional-only, ordinary, keyword-only)."""
    params = func.params
    return [p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]]


def dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names, else ``None``."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def statements_of(node: Any) -> list[cst.BaseStatement]:
    """The statements a wrapping edit left of a statement: itself, what a ``FlattenSentinel``
    holds, or none (it moved)."""
    if isinstance(node, cst.FlattenSentinel):
        return list(node.nodes)
    if isinstance(node, cst.RemovalSentinel):
        return []
    return [node]


def insert_after(statements: Sequence[cst.BaseStatement]) -> Callable[[Any], Any]:
    """A wrapping edit of a statement: ``statements`` added after it."""

    def apply(node: Any) -> Any:
        return cst.FlattenSentinel([*statements_of(node), *statements])

    return apply


def torch_name(source: SourceFile) -> str | None:
    """The name ``import torch`` (or ``import torch as th``) binds in the file, if it does."""
    for node in source.nodes(cst.Import):
        for alias in node.names:  # type: ignore[attr-defined]
            name = dotted(alias.name) or ""
            if name == "torch":
                return alias.asname.name.value if alias.asname else "torch"  # type: ignore[union-attr]
            if name.startswith("torch.") and alias.asname is None:
                return "torch"  # `import torch.nn` binds torch too
    return None


def assignments(source: SourceFile, variable: str) -> list[cst.Assign | cst.AnnAssign]:
    """Every plain assignment of ``variable`` in the file (``x = ...``, ``x: T = ...``)."""
    return [
        node
        for node in source.nodes(cst.Assign)
        if len(node.targets) == 1  # type: ignore[attr-defined]
        and isinstance(node.targets[0].target, cst.Name)  # type: ignore[attr-defined]
        and node.targets[0].target.value == variable  # type: ignore[attr-defined]
    ] + [
        node
        for node in source.nodes(cst.AnnAssign)
        if isinstance(node.target, cst.Name) and node.target.value == variable  # type: ignore[attr-defined]
    ]


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def set_value(value: cst.BaseExpression) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """An edit of an argument or an assignment: its value becomes ``value``."""

    def apply(node: cst.CSTNode) -> cst.CSTNode:
        return node.with_changes(value=value)

    return apply


def add_keywords(
    names_values: Sequence[tuple[str, object]],
) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """An edit of a call: keyword arguments appended, in the call's own layout (one per line in
    a call written one argument per line)."""

    def apply(call: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(call, cst.Call)
        if not names_values:
            return call
        args = list(call.args)
        new = [
            cst.Arg(
                keyword=cst.Name(n),
                value=literal(v),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.SimpleWhitespace(""),
                ),
            )
            for n, v in names_values
        ]
        if not args:
            return call.with_changes(
                args=_joined(new, cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            )
        last = args[-1]
        between = (
            args[-2].comma
            if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma)
            else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        if isinstance(last.comma, cst.Comma):  # a trailing comma: the new ones keep it last
            trailing = last.comma
            args[-1] = last.with_changes(comma=between)
            new = _joined(new, between)
            new[-1] = new[-1].with_changes(comma=trailing)
        else:
            args[-1] = last.with_changes(comma=between)
            new = _joined(new, between)
        return call.with_changes(args=[*args, *new])

    return apply


def remove_keywords(names: Sequence[str]) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """An edit of a call: these keyword arguments removed (the layout of the others kept)."""

    def apply(call: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(call, cst.Call)
        args = list(call.args)
        kept = [a for a in args if a.keyword is None or a.keyword.value not in names]
        if kept and kept[-1] is not args[-1]:
            kept[-1] = kept[-1].with_changes(comma=args[-1].comma)
        return call.with_changes(args=kept)

    return apply


def _joined(args: list[cst.Arg], comma: cst.Comma) -> list[cst.Arg]:
    return [a.with_changes(comma=comma) for a in args[:-1]] + args[-1:]


def chain(*edits: Callable[[cst.CSTNode], cst.CSTNode]) -> Callable[[cst.CSTNode], cst.CSTNode]:
    def apply(node: cst.CSTNode) -> cst.CSTNode:
        for edit in edits:
            node = edit(node)
        return node

    return apply
