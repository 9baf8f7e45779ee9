"""Comments the patch would make untrue: the trailing comment of a line whose code it changes.

libcst keeps every comment where it was, so a rewritten line keeps the comment written for the
line as it was: ``num_workers=4, persistent_workers=True)  # 'num_workers=0' keeps it simple``,
``torch.set_num_threads(1)  # use both cores``, ``# rebuilt every step`` on a line that no longer
rebuilds. On each line the patch changes, the old line's trailing comment is left out when the
code around it was changed (not only added to), or when it names what was added (``# no workers``
beside an added ``num_workers=4``); the patch's notes list each one so the user can write what
the new line does. A comment on its own line, or on a line the patch leaves alone, stays, and
so does a tool's instruction (``# type: ignore``, ``# noqa``, ``# fmt: skip``). Comments are
found by Python's tokenizer, so a ``#`` inside a string is never taken for one.

Torch-free: this runs in the parent process, on text.
"""

from __future__ import annotations

import difflib
import io
import re
import tokenize

#: Comments that are instructions to tools (type checkers, linters, formatters, coverage):
#: never left out, whatever changed around them.
PRAGMA = re.compile(r"#\s*(type:|noqa|pragma|fmt:|pylint:|nosec|isort:|mypy:|pyright:|ruff:)")


def comment_columns(text: str) -> dict[int, int]:
    """The column of each line's comment, by line number (from 1), as Python's tokenizer finds
    them (a ``#`` inside a string, on one line or many, is none); empty when the text does not
    tokenize."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return {}
    return {t.start[0]: t.start[1] for t in tokens if t.type == tokenize.COMMENT}


def _split(line: str, column: int | None) -> tuple[str, str]:
    """``(code, comment)`` of a line without its ending, its comment at ``column``."""
    if column is None:
        return line, ""
    return line[:column], line[column:]


def stale_comments_dropped(before: str, after: str) -> tuple[str, list[tuple[int, str]]]:
    """``after`` (``before`` patched) without the comments its changes made untrue, and each
    one left out as ``(its line in after, the comment)``."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    dropped: list[tuple[int, str]] = []
    old_at, new_at = comment_columns(before), comment_columns(after)
    blocks = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in blocks:
        if tag != "replace":
            continue
        olds: dict[str, list[str]] = {}
        for i in range(i1, i2):
            code, comment = _split(_body(old[i]), old_at.get(i + 1))
            if comment:
                olds.setdefault(comment.strip(), []).append(code.rstrip())
        for j in range(j1, j2):
            body = _body(new[j])
            code, comment = _split(body, new_at.get(j + 1))
            codes = olds.get(comment.strip()) if comment else None
            if codes is None or code.rstrip() in codes or PRAGMA.match(comment):
                continue  # a comment of its own, its line unchanged, or a tool's instruction
            if any(_kept(was, code.rstrip(), comment) for was in codes):
                continue
            new[j] = code.rstrip() + new[j][len(body) :]
            dropped.append((j + 1, comment.strip()))
    return "".join(new), dropped


def _body(line: str) -> str:
    return line.rstrip("\r\n")


def _kept(was: str, now: str, comment: str) -> bool:
    """Whether the comment stays true: ``now`` only adds to ``was``, and names none of what it
    adds (``# the batch`` stays beside an added ``num_workers=4``; ``# no workers`` does not)."""
    added = []
    blocks = difflib.SequenceMatcher(a=was, b=now, autojunk=False).get_opcodes()
    for tag, _, _, j1, j2 in blocks:
        if tag == "insert":
            added.append(now[j1:j2])
        elif tag != "equal":
            return False  # the old code itself changed
    words = set(re.findall(r"[A-Za-z]{3,}", " ".join(added)))
    return not any(re.search(rf"\b{re.escape(w)}\b", comment, re.IGNORECASE) for w in words)
