"""Which optimizer's ``step()`` ends a training step.

The first optimizer seen, until another one steps twice while it does not: the script re-created
its optimizer (after a stray ``step()``, or once per epoch), and following the old one would let
the whole script run unmeasured. Optimizers that step in turn (a GAN's generator and
discriminator) keep the first as the boundary.
"""

from __future__ import annotations

import weakref
from typing import Any

from ._data import CaptureData


class OptimizerTracker:
    def __init__(self, data: CaptureData) -> None:
        self._data = data
        self._known: weakref.WeakSet = weakref.WeakSet()
        self._primary: weakref.ref | None = None
        #: Steps of other optimizers since the primary one last stepped, by id.
        self._other_steps: dict[int, int] = {}
        #: Where the script built each optimizer (``file:line``).
        self._sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def created(self, optimizer: Any, site: str) -> None:
        self._sites.setdefault(optimizer, site)

    def site_of(self, optimizer: Any) -> str | None:
        """Where the script built ``optimizer`` (``file:line``), when seen."""
        return self._sites.get(optimizer)

    @property
    def primary(self) -> Any:
        """The optimizer whose ``step()`` ends a training step, if it is alive."""
        return self._primary() if self._primary is not None else None

    def known(self) -> list[Any]:
        """Every optimizer the script has stepped (alive)."""
        return list(self._known)

    def trains(self, module: Any) -> bool:
        """Whether an optimizer the script has stepped updates one of ``module``'s parameters (a
        teacher or a target network that no optimizer updates is not trained); read on a call
        that evaluates only, so its cost is of those calls."""
        trained = {id(p) for o in self._known for g in o.param_groups for p in g["params"]}
        return any(id(p) in trained for p in module.parameters())

    def seen(self, optimizer: Any) -> None:
        if optimizer not in self._known:
            self._known.add(optimizer)
            self._data.seen["optimizers"] += 1

    def is_step_end(self, optimizer: Any, clock: Any) -> bool:
        """Whether this (outermost) ``step()`` ends a training step; follows a newer optimizer."""
        primary = self._primary() if self._primary is not None else None
        if primary is optimizer:
            self._other_steps.clear()
            return True
        if primary is not None:
            key = id(optimizer)
            self._other_steps[key] = self._other_steps.get(key, 0) + 1
            if self._other_steps[key] < 2:
                return False
            self._note("the first one stopped stepping")
        elif self._primary is not None:
            self._note("the first one is gone")
        self._other_steps.clear()
        first = self._primary is None
        self._primary = weakref.ref(optimizer)
        if first:
            # the first optimizer's parameters say where training runs
            clock.detect(p for group in optimizer.param_groups for p in group["params"])
        return True

    def _note(self, why: str) -> None:
        note = f"the step boundary moved to a newer optimizer: {why} (the script re-created it)"
        if note not in self._data.notes:  # once, also for a script that re-creates it per epoch
            self._data.notes.append(note)
