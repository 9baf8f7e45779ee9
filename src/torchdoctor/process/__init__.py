"""torchdoctor.process: running a script under torchdoctor, across the process boundary.

The parent side (``run_cli``: supervise, save, report, verify the fix) and the supervisor of one
process or of a torchrun job (``supervisor``, ``launch``, sharing ``_processes``) never import
torch; the script's side (``child``: the entry of the script's process; ``inprocess``:
``run_target`` and ``watch``; ``build``: the record) does. They speak the protocol of ``stream``;
the ``ending`` package decides how a run ended (its status, exit status, cause and words) from
what each side saw, once, before the verdict is derived.

Importing this package does not import torch: the names of the script's side load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._processes import Supervised
from .parent import printing, run_cli, verify_fix
from .supervisor import run_supervised
from .target import Target, resolve_target

if TYPE_CHECKING:
    from .build import build_record
    from .inprocess import RunOutcome, run_target, user_traceback, watch

#: Names of the script's side (they import torch), loaded when first asked for.
_SCRIPT_SIDE = {
    "RunOutcome": "inprocess",
    "run_target": "inprocess",
    "user_traceback": "inprocess",
    "watch": "inprocess",
    "build_record": "build",
}

__all__ = [
    "RunOutcome",
    "Supervised",
    "Target",
    "build_record",
    "printing",
    "resolve_target",
    "run_cli",
    "run_supervised",
    "run_target",
    "user_traceback",
    "verify_fix",
    "watch",
]


def __getattr__(name: str) -> Any:
    module = _SCRIPT_SIDE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
