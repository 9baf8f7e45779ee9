"""The ``--fix`` re-run's ``torch.set_num_threads(k)`` at the start of the script, held.

The fix advises the call at the start of the script; a re-run measures it by setting the count
when the capture installs and keeping it: the script's own later ``torch.set_num_threads`` calls
(which the permanent fix would replace) are noted, not applied. The patch and the thread count
are undone with the session's other patches.
"""

from __future__ import annotations

import torch

from ._patch import Patcher


def hold_threads(patcher: Patcher, threads: int, notes: list[str]) -> None:
    """Set the process's intra-op threads to ``threads`` until ``patcher`` restores them."""
    original = patcher.original(torch.set_num_threads)
    patcher.set_state(torch.get_num_threads, original, threads)
    told: list[int] = []

    def set_num_threads(count: int) -> None:
        if not told:
            notes.append(
                f"the script's torch.set_num_threads({count}) was not applied: the fix's "
                f"torch.set_num_threads({threads}) holds for the whole re-run"
            )
        told.append(count)

    patcher.set(torch, "set_num_threads", set_num_threads)
