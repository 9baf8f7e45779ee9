"""Memory that grows step over step because a variable keeps every step's autograd graph: a loss
summed as a tensor (``total_loss += loss``), a list that keeps each step's loss
(``losses.append(loss)``), a hidden state carried over without ``.detach()``. Each keeps what
the graph references (its activations too where no backward freed them), so memory grows with
every step until the run ends or runs out (docs/memory.md).

:class:`KeptGraphs` looks at the user's frames at the end of two watched steps (the sync
finder's): a tensor variable whose graph at the second step still reaches its graph at the
first, or a list that grew by a tensor with a graph, is a ``loop.graph-kept`` finding at the line
that keeps it. Only references are read; nothing of the script changes.
"""

from __future__ import annotations

import ast
import linecache
import sys
from types import CodeType, FrameType
from typing import Any

import torch

from ..record import Finding
from ._frames import is_user_file

#: Graph nodes walked from a value to find an earlier step's (a long graph is cut there).
WALK_LIMIT = 20_000
#: Longest list looked into.
LIST_LIMIT = 1_000_000
#: A dict of more entries than this is not looked into for lists (``history['loss']``).
DICT_LIMIT = 64
#: A list that grows by this many MiB of tensors (without graphs) a step is memory creeping.
TENSORS_MB = 1.0


class KeptGraphs:
    """Call :meth:`look` at the end of each watched step; :meth:`findings` after the second."""

    def __init__(self) -> None:
        #: ``(file, function, name)`` -> the tensor's graph node, or the list and its length.
        self._before: dict[tuple[str, str, str], Any] = {}
        self._found: set[tuple[str, str, str]] = set()
        self.looks = 0
        self._findings: list[Finding] = []

    def look(self) -> None:
        """Compare the user's variables now with the last look's (the step's end)."""
        now: dict[tuple[str, str, str], Any] = {}
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if is_user_file(code.co_filename):
                for name, value in _variables(frame):
                    held = _held(value)
                    if held is None:
                        continue
                    key = (code.co_filename, code.co_name, name)
                    now.setdefault(key, held)
                    earlier = self._before.get(key)
                    if earlier is not None and key not in self._found:
                        how = _kept(earlier, held)
                        finding = _finding(frame, name, how, earlier, held) if how else None
                        if finding is not None:
                            self._found.add(key)
                            self._findings.append(finding)
            frame = frame.f_back
        self._before = now
        self.looks += 1

    def findings(self) -> list[Finding]:
        self._before = {}  # the graphs are not kept past the watch
        return list(self._findings)


def _variables(frame: FrameType) -> list[tuple[str, Any]]:
    """The frame's variables, and the lists a dict of them holds (``history['loss']``)."""
    out = []
    for name, value in list(frame.f_locals.items()):
        if name.startswith("__"):
            continue
        out.append((name, value))
        if isinstance(value, dict) and len(value) <= DICT_LIMIT:
            out.extend(
                (f"{name}[{key!r}]", item)
                for key, item in list(value.items())
                if isinstance(key, (str, int)) and isinstance(item, list)
            )
    return out


def _held(value: Any) -> Any:
    """What a variable holds of a graph: its node (a tensor with one), or the list and its
    length (a list whose last item is a tensor); ``None`` otherwise."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.grad_fn) if value.grad_fn is not None else None
    if isinstance(value, list) and 0 < len(value) <= LIST_LIMIT:
        if isinstance(value[-1], torch.Tensor):
            return ("list", value, len(value))
    return None


def _kept(earlier: Any, now: Any) -> str:
    """``"sum"`` when the graph now reaches the earlier one, ``"list"`` when the list grew by a
    tensor with a graph, ``"tensors"`` when it grew by :data:`TENSORS_MB` MB or more of tensors
    without one; ``""`` otherwise."""
    if earlier[0] == "tensor" and now[0] == "tensor":
        if now[1] is not earlier[1] and _reaches(now[1], earlier[1]):
            return "sum"
    if earlier[0] == "list" and now[0] == "list" and now[1] is earlier[1] and now[2] > earlier[2]:
        added = [t for t in now[1][earlier[2] : now[2]] if isinstance(t, torch.Tensor)]
        if any(t.grad_fn is not None for t in added):
            return "list"
        if added_bytes(added) >= TENSORS_MB * 2**20:
            return "tensors"
    return ""


def added_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the storages of ``tensors``, each once (a view keeps its whole storage)."""
    seen: dict[int, int] = {}
    for t in tensors:
        try:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        except Exception:  # noqa: BLE001 - a tensor subclass without storage: not counted
            continue
    return sum(seen.values())


def _reaches(start: Any, target: Any) -> bool:
    seen: set[int] = set()
    todo = [start]
    while todo and len(seen) < WALK_LIMIT:
        node = todo.pop()
        if node is target:
            return True
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(fn for fn, _ in getattr(node, "next_functions", ()))
    return False


def _finding(frame: FrameType, name: str, how: str, earlier: Any, now: Any) -> Finding | None:
    nodes = _nodes(frame.f_code)  # the frame's code, parsed once for both questions
    line, source, added, others = _keeping_line(frame, nodes, name, how)
    also = f" (also appended to at line {', '.join(map(str, others))})" if others else ""
    if how == "tensors":
        if _trimmed(nodes, name):
            return None  # a buffer the loop trims (`replay.pop(0)`): bounded, not a creep
        finding = _tensors_finding(frame, name, line, source, earlier, now)
        finding.title += also
        return finding
    if how == "list":
        title = (
            f"`{name}` keeps each step's tensor with its autograd graph (a list that grows every "
            "step): memory grows with every step the run takes"
        )
        value = added or "loss"
        fix = f"{name}.append({value}.detach())  # the value, not the graph ({value}.item() for a number)"
    else:
        title = (
            f"`{name}` keeps the autograd graph of every step (its graph reaches the previous "
            "step's): memory grows with every step the run takes"
        )
        fix = (
            f"{name} += {added}.item()  # a number, not the graph"
            if added
            else f"{source or name + ' = ...'}\n{name} = {name}.detach()  # the value, not the "
            "graph it was computed with"
        )
    title += also
    detail: dict[str, Any] = {"variable": name, "how": how}
    if how == "list":  # the tensors themselves, at least (their graphs hold more)
        added = [t for t in now[1][earlier[2] : now[2]] if isinstance(t, torch.Tensor)]
        detail["mb_per_step"] = round(added_bytes(added) / 2**20, 2)
        detail["device"] = str(added[-1].device)
    return Finding(
        kind="loop.graph-kept",
        title=title,
        fix=fix,
        file=frame.f_code.co_filename,
        line=line,
        source=source,
        severity="critical",
        detail=detail,
    )


def _tensors_finding(
    frame: FrameType, name: str, line: int, source: str, earlier: Any, now: Any
) -> Finding:
    """A list that keeps megabytes of tensors every step (features for an epoch's metric)."""
    added = [t for t in now[1][earlier[2] : now[2]] if isinstance(t, torch.Tensor)]
    nbytes = added_bytes(added)
    device = str(added[-1].device)
    where = "on the CPU" if device == "cpu" else f"on {device}"
    fix = (
        "keep what the metric needs as it goes (a running sum, a count) instead of every "
        "step's tensors"
    )
    if device != "cpu":
        fix += f", or keep each on the CPU: {name}.append(... .detach().cpu())"
    fix += "; clear the list once it is used"
    return Finding(
        kind="loop.memory-creep",
        title=f"`{name}` keeps {nbytes / 2**20:.1f} MiB of tensors {where} every step (a list that "
        "grows each step): memory grows with every step until the list is cleared",
        fix=fix,
        file=frame.f_code.co_filename,
        line=line,
        source=source,
        severity="warning",
        detail={"variable": name, "how": "tensors", "mb_per_step": round(nbytes / 2**20, 2),
                "device": device},
    )  # fmt: skip


def _keeping_line(
    frame: FrameType, nodes: list[Any] | None, name: str, how: str
) -> tuple[int, str, str, list[int]]:
    """The statement of the frame's code that keeps the value (``name += ...``,
    ``name.append(...)``, ``name += [x]``, ``name = ... name ...``), else the frame's current
    line; for a sum (``name += x``) or an append, ``x`` as code (its ``.item()`` or
    ``.detach()`` is the fix); and the lines of the other appends to a list (which one ran
    is not told: the first in the file is named)."""
    code = frame.f_code
    if nodes is None:
        return frame.f_lineno, "", "", []
    ranked: list[tuple[int, int, str]] = []  # (rank, line, added): the likeliest first
    for node in nodes:
        line = node.lineno
        if how in ("list", "tensors"):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "extend", "insert")
                and _is(node.func.value, name)
            ):
                kept = node.args[-1] if node.args and node.func.attr != "extend" else None
                simple = isinstance(kept, (ast.Name, ast.Attribute, ast.Call))
                ranked.append((0, line, ast.unparse(kept) if simple else ""))
            elif isinstance(node, ast.AugAssign) and _is(node.target, name):
                items = node.value.elts if isinstance(node.value, ast.List) else []
                simple = len(items) == 1 and isinstance(items[0], (ast.Name, ast.Attribute))
                ranked.append((0, line, ast.unparse(items[0]) if simple else ""))
        elif isinstance(node, ast.AugAssign) and _is(node.target, name):
            added = ast.unparse(node.value) if isinstance(node.op, ast.Add) else ""
            simple = isinstance(node.value, (ast.Name, ast.Attribute, ast.Call))
            ranked.append((0, line, added if simple or not added else f"({added})"))
        elif isinstance(node, ast.Assign) and any(_is(t, name) for t in node.targets):
            reads = any(_is(n, name) for n in ast.walk(node.value))
            ranked.append((1 if reads else 2, line, ""))
    if not ranked:
        return frame.f_lineno, "", "", []
    _, line, added = min(ranked)
    others = sorted({n for rank, n, _ in ranked if rank == 0 and n != line})
    return line, linecache.getline(code.co_filename, line).strip(), added, others


def _trimmed(nodes: list[Any] | None, name: str) -> bool:
    """Whether the frame's code (its ``nodes``) takes items out of the list ``name``
    (``name.pop(0)``, ``del name[0]``, ``name.clear()``, ``name = name[-k:]``): a bounded
    buffer."""
    for node in nodes or []:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pop", "clear", "remove")
            and _is(node.func.value, name)
        ):
            return True
        if isinstance(node, ast.Delete) and any(
            isinstance(t, ast.Subscript) and _is(t.value, name) for t in node.targets
        ):
            return True
        if (
            isinstance(node, ast.Assign)
            and any(_is(t, name) for t in node.targets)
            and isinstance(node.value, ast.Subscript)
            and _is(node.value.value, name)
        ):
            return True
    return False


def _nodes(code: CodeType) -> list[Any] | None:
    """The statements and expressions of the file within ``code``'s lines; ``None`` when the
    file does not parse."""
    numbers = [n for _, _, n in code.co_lines() if n]
    first, last = code.co_firstlineno, max(numbers, default=code.co_firstlineno)
    try:
        tree = ast.parse("".join(linecache.getlines(code.co_filename)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return [n for n in ast.walk(tree) if first <= getattr(n, "lineno", 0) <= last]


def _is(node: ast.AST, name: str) -> bool:
    """``node`` is the variable ``name``, or the dict's item it names (``history['loss']``)."""
    if isinstance(node, ast.Name):
        return node.id == name
    return isinstance(node, ast.Subscript) and "[" in name and ast.unparse(node) == name
