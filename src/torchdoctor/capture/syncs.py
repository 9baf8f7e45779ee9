"""Find host-device syncs and per-step host-to-device copies, down to the user's line.

The public door of the sync finder: :func:`watch_syncs` (a ``with`` block), :func:`find_syncs`
(one call) and :class:`SyncWatcher` (what the capture session drives). How it works is told in
``_sync_watcher.py``; the rules in ``_sync_rules.py``; the operation tables in ``_sync_ops.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from .._batches import tensors_in
from ..record import Finding
from ._sync_watcher import SyncEvent, SyncWatcher

__all__ = ["SyncEvent", "SyncWatch", "SyncWatcher", "find_syncs", "watch_syncs"]


@dataclass
class SyncWatch:
    """What :func:`watch_syncs` yields; ``findings`` is filled when the block exits."""

    watcher: SyncWatcher
    findings: list[Finding] = field(default_factory=list)

    @property
    def events(self) -> list[SyncEvent]:
        return self.watcher.events

    def mark_step(self) -> None:
        """Count a step boundary, so repeated constants and calls per step are seen."""
        self.watcher.mark_step()


@contextlib.contextmanager
def watch_syncs(on_accelerator: bool | None = None) -> Iterator[SyncWatch]:
    """Find syncs and host-to-device copies made inside a ``with`` block.

    Args:
        on_accelerator: as for :class:`SyncWatcher`; ``None`` means "CUDA is available".

    Yields:
        A :class:`SyncWatch`; its ``findings`` list is filled on exit, even if the block raised.

    Example::

        with torchdoctor.watch_syncs() as watch:
            loss = my_loss(logits, target)
        assert not watch.findings, watch.findings
    """
    watcher = SyncWatcher(on_accelerator=on_accelerator)
    watch = SyncWatch(watcher)
    watcher.start()
    try:
        yield watch
    finally:
        watcher.stop()
        watch.findings[:] = watcher.findings()


def find_syncs(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Finding]:
    """Call ``fn(*args, **kwargs)`` once and return the syncs and copies it makes.

    The run counts as an accelerator run when an argument (or a parameter of ``fn``, if it is a
    module) is on an accelerator; otherwise the CPU rule applies, also on a machine with a GPU:
    tensors that exist before the call count as device-side (see ``docs/syncs.md``).

    Returns:
        Findings, most costly first; empty when ``fn`` keeps its work on the device.
    """
    tensors = tensors_in((args, kwargs), attributes=False, depth=3)
    if isinstance(fn, torch.nn.Module):
        tensors += list(fn.parameters()) + list(fn.buffers())
    on_accelerator = any(t.device.type not in ("cpu", "meta") for t in tensors)
    with watch_syncs(on_accelerator=on_accelerator) as watch:
        fn(*args, **kwargs)
    return watch.findings
