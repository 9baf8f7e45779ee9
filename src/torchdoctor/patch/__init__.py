"""torchdoctor.patch: ``torchdoctor fix``, the measured remedies written as a patch of the user's
own code and each measured on the patched code (docs/fix.md).

``_edits`` changes source on its concrete syntax tree (libcst); ``_remedies`` plans each remedy
where its setting lives, ``_threads``, ``_syncs`` and ``_levers`` (the trials' levers) too;
``_project`` says which files are the user's and writes the diff;
``_measure`` alternates the original and the patched runs; ``command`` puts them together.
Torch-free: the script runs in supervised child processes.
"""

from __future__ import annotations

from ._edits import PatchError
from ._levers import LEVERS, plan_lever
from ._measure import LOSS_STEPS, measure_patch
from ._project import Project, file_diff, project_root
from ._remedies import Remedy, plan_loader, plan_optimizer
from ._syncs import plan_syncs
from ._threads import plan_threads
from .command import BACKUP_DIR, DEFAULT_ROUNDS, check_patchable, fix_cli, patch_record, plan

__all__ = [
    "BACKUP_DIR",
    "LEVERS",
    "DEFAULT_ROUNDS",
    "LOSS_STEPS",
    "PatchError",
    "Project",
    "Remedy",
    "check_patchable",
    "file_diff",
    "fix_cli",
    "measure_patch",
    "patch_record",
    "plan",
    "plan_lever",
    "plan_loader",
    "plan_optimizer",
    "plan_syncs",
    "plan_threads",
    "project_root",
]
