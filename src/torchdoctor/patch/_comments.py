"""Comments the patch would make untrue: the trailing comment of a line whose code it changes.

libcst keeps every comment where it was, so a rewritten line keeps the comment written for the
line as it was: ``num_workers=4, persistent_workers=True)  # 'num_workers=0' keeps it simple``,
``torch.set_num_threads(1)  # use both cores``, ``# rebuilt every step`` on a line that no longer
rebuilds. On each line the patch changes, the old line's trailing comment is left out when the
code around it was changed (not only added to), or when it names what was added (``# no workers``
beside an added ``num_workers=4``); the patch's notes list each one so the user can write what
the new line does. A comment on its own line, or on a line the patch leaves alone, stays.

Torch-free: this runs in the parent process, on text.
"""

from __future__ import annotations

import difflib
import re


def split_comment(line: str) -> tuple[str, str]:
    """``(code, comment)`` of one line without its line ending: the comment from its ``#`` on
    (``""`` when there is none; a ``#`` inside a string on the line is not one)."""
    quote = ""
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif line.startswith(('"""', "'''"), i):
            quote = line[i : i + 3]
            i += 3
            continue
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i], line[i:]
        i += 1
    return line, ""


def stale_comments_dropped(before: str, after: str) -> tuple[str, list[tuple[int, str]]]:
    """``after`` (``before`` patched) without the comments its changes made untrue, and each
    one left out as ``(its line in after, the comment)``."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    dropped: list[tuple[int, str]] = []
    blocks = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in blocks:
        if tag != "replace":
            continue
        olds: dict[str, list[str]] = {}
        for line in old[i1:i2]:
            code, comment = split_comment(_body(line))
            if comment:
                olds.setdefault(comment.strip(), []).append(code.rstrip())
        for j in range(j1, j2):
            body = _body(new[j])
            code, comment = split_comment(body)
            codes = olds.get(comment.strip()) if comment else None
            if codes is None or code.rstrip() in codes:
                continue  # a comment of its own, or its line unchanged
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
