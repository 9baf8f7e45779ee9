"""The trace files a command is given: files, and the traces in the directories named."""

from __future__ import annotations

import os
from pathlib import Path

from ._reader import TraceFormatError


def find_trace_files(paths: list[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and directories into the trace files they hold (``*.json``, ``*.json.gz``).

    Raises:
        TraceFormatError: when a path is missing or a directory holds no trace.
    """
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        try:
            p.stat()
        except FileNotFoundError:
            pass  # told below, with the other missing paths
        except OSError as exc:  # a name too long, a symlink loop: the path is at fault
            raise TraceFormatError(
                f"{p}: cannot be read ({exc.strerror or exc})", "check the path"
            ) from None
        if p.is_dir():
            inside = sorted(
                q
                for q in p.rglob("*")
                if q.is_file() and (q.name.endswith(".json") or q.name.endswith(".json.gz"))
            )
            # tensorboard_trace_handler names its files *.pt.trace.json[.gz]; when a directory
            # has those, other JSON files beside them (saved records, configs) are not traces.
            profiler_files = [q for q in inside if ".pt.trace.json" in q.name]
            inside = profiler_files or inside
            if not inside:
                raise TraceFormatError(
                    f"{p}: no .json or .json.gz trace files in this directory",
                    "pass the directory torch.profiler.tensorboard_trace_handler wrote to",
                )
            found.extend(inside)
        elif p.is_file():
            found.append(p)
        else:
            raise TraceFormatError(f"{p}: no such file or directory")
    # a file named twice (a folder and a file in it, a link to it) is one rank's trace, once
    once: dict[str, Path] = {}
    for q in found:
        once.setdefault(os.path.realpath(q), q)
    return list(once.values())
