"""Processes the script starts itself (``torch.multiprocessing``, ``multiprocessing.Process``).

A Hogwild-style script trains in the processes it starts, not in its own: torchdoctor measures
only the process it runs, so it names what was started, and where, instead of advising about an
``optimizer.step()`` the main process never reaches. DataLoader workers, torch's and Python's
own pools (compile workers, ``concurrent.futures``) are not the script's training processes.
"""

from __future__ import annotations

import os
from typing import Any

#: Modules whose processes are machinery, not a script's training.
_MACHINERY = ("torch.", "torchdoctor.", "concurrent.futures", "multiprocessing.")


class ProcessWatch:
    """Counts the processes the script starts, by their target."""

    def __init__(self, seen: dict[str, int], notes: list[str]) -> None:
        self._seen = seen
        self._notes = notes
        self._targets: dict[str, int] = {}

    def started(self, process: Any) -> None:
        target = getattr(process, "_target", None)
        if target is None:
            return  # a Process subclass with its own run(): named by its class
        module = getattr(target, "__module__", None) or ""
        if module.startswith(_MACHINERY):
            return
        self._seen["processes_started"] = self._seen.get("processes_started", 0) + 1
        name = describe(target)
        first = not self._targets
        self._targets[name] = self._targets.get(name, 0) + 1
        text = self.note()
        if not first:
            self._notes[:] = [n for n in self._notes if not n.startswith(_NOTE_HEAD)]
        self._notes.append(text)

    def note(self) -> str:
        started = ", ".join(
            f"{count} running {name}" if count > 1 else name
            for name, count in self._targets.items()
        )
        total = sum(self._targets.values())
        return (
            f"{_NOTE_HEAD} {total} process(es) of its own ({started}); torchdoctor measures only "
            "the script's own process, so training done there is not in these figures"
        )


_NOTE_HEAD = "the script started"


def describe(target: Any) -> str:
    """``train (hogwild.py:31)`` for a function, else its type's name."""
    code = getattr(target, "__code__", None)
    name = getattr(target, "__qualname__", None) or type(target).__name__
    if code is None:
        return name
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
