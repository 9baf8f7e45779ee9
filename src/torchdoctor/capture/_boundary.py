"""Where a training step ends: an optimizer's ``step()``, or, in loops without one, the loss.

Most loops step a ``torch.optim`` optimizer once per training step (after one or several
backward calls: gradient accumulation), and that ``step()`` is the boundary. Loops that update
the parameters by hand (``p.data.add_(p.grad, alpha=-lr)``) never call one. There the boundary is
read from the gradients: such a loop clears them (``model.zero_grad()``) or rewrites them (clipping)
between two steps, while accumulation leaves them alone between two backward calls. Once the
gradients were found changed between backward calls twice, with no optimizer step seen, a step is
the number of outermost backward calls between those two changes (the parameter watched is the
outermost module's first one with a gradient, or in loops without a module a leaf of the loss's
autograd graph). A loop that runs its model
with gradients on but never calls backward has a step per call of its outermost module.

An optimizer step seen later wins: the boundary moves to it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..record import StepBoundaryKind

#: Gradient changes between backward calls seen before a loop without an optimizer is decided.
CLEARS_TO_DECIDE = 2
#: Calls of the outermost module with gradients on, and no backward call, before each call is
#: taken as a step.
FORWARDS_TO_DECIDE = 8
#: Batches a DataLoader must have delivered before calls of the model decide the boundary.
BATCHES_TO_DECIDE = 3
#: Backward calls with no optimizer step and gradients never cleared (they accumulate) before
#: each backward call is taken as a step: a loop that never updates its parameters.
BACKWARDS_TO_DECIDE = 16
#: How much more evidence a fallback needs once the script has built an optimizer (it may be
#: about to step it, after warm-up iterations or a long accumulation).
OPTIMIZER_BUILT_FACTOR = 4


class StepBoundary:
    """Decides which call ends a step; the session asks it at every candidate call."""

    def __init__(self) -> None:
        #: ``None`` until the loop shows which kind of boundary it has.
        self.kind: StepBoundaryKind | None = None
        #: Backward calls per step, when the boundary is the loss.
        self.backwards_per_step = 1
        self._param: weakref.ref | None = None
        self._grad_state: tuple[int, int] | None = None
        self._backwards = 0
        self._clear_at: list[int] = []
        self._in_step = 0
        self._grad_forwards = 0
        #: The script built an optimizer (``torch.optim.Optimizer.__init__`` seen).
        self.optimizer_built = False
        #: What decided the boundary, in words, for the record.
        self.evidence = ""
        #: The loop's backward calls never led to a parameter change (no optimizer.step(), no
        #: in-place update): decided with the ``backward`` fallback of a loop that never clears.
        self.never_updates = False
        self._param_values: Any = None

    # --- what the session tells -------------------------------------------------------------

    def optimizer_stepped(self, name: str = "optimizer") -> bool:
        """An optimizer ended a step; True when that moves the boundary from another kind."""
        moved = self.kind not in (None, "optimizer")
        if self.kind != "optimizer":
            self.evidence = f"{name}.step() returned"
        self.kind = "optimizer"
        return moved

    def forward_starting(
        self,
        grad_enabled: bool,
        backward_seen: bool,
        trainable: bool = True,
        batches: int | None = None,
    ) -> bool:
        """An outermost module call starts; True when it begins a new step.

        ``trainable``: the module has parameters that require gradients; ``batches``: batches
        drawn from DataLoaders so far, or ``None`` when the script draws none.
        """
        if self.kind is None and grad_enabled and not backward_seen and trainable:
            self._grad_forwards += 1
            needed = FORWARDS_TO_DECIDE * self._factor()
            if self._grad_forwards >= needed and (batches is None or batches >= BATCHES_TO_DECIDE):
                self.kind = "forward"
                drawn = "" if batches is None else f" over {batches} batches"
                self.evidence = (
                    f"{self._grad_forwards} calls of a trainable outermost module with gradients "
                    f"on{drawn}, and no backward call or optimizer.step()"
                )
        return self.kind == "forward"

    def backward_starting(self) -> bool:
        """An outermost backward call starts; True when it settles a loop without an optimizer."""
        self._backwards += 1
        if (
            self.kind in (None, "forward")
            and not self._clear_at
            and self._backwards >= BACKWARDS_TO_DECIDE * self._factor()
        ):
            # Backward after backward, gradients never cleared, no optimizer: nothing trains.
            # Each call is a step, so the run still measures what the loop costs.
            self.kind = "backward"
            self.backwards_per_step = 1
            self._in_step = 0
            self.never_updates = not self._params_changed()
            changed = "changed" if not self.never_updates else "never changed"
            self.evidence = (
                f"{self._backwards} backward calls without an optimizer.step(), the gradients "
                f"never cleared between them, and the parameters {changed}"
            )
            return True
        if self.kind in (None, "forward") and self._grads_changed():
            self._clear_at.append(self._backwards)
            if len(self._clear_at) >= CLEARS_TO_DECIDE * self._factor():
                self.kind = "backward"
                self.backwards_per_step = max(1, self._clear_at[-1] - self._clear_at[-2])
                self._in_step = 0
                built = (
                    " (an optimizer was built but never stepped)" if self.optimizer_built else ""
                )
                self.evidence = (
                    f"the gradients were cleared or rewritten between backward calls "
                    f"{len(self._clear_at)} times in {self._backwards} backward calls, and no "
                    f"optimizer.step(){built}"
                )
                return True
        return False

    def _factor(self) -> int:
        return OPTIMIZER_BUILT_FACTOR if self.optimizer_built else 1

    def backward_ended(self, parameters: Callable[[], Iterable[Any]]) -> bool:
        """An outermost backward call returned; True when it ends a step.

        ``parameters`` gives the outermost modules' parameters; it is called only until one with
        a gradient is found.
        """
        if self.kind != "optimizer":
            self._remember_grad(parameters)
        if self.kind != "backward":
            return False
        self._in_step += 1
        if self._in_step < self.backwards_per_step:
            return False
        self._in_step = 0
        return True

    def watched(self) -> Any:
        """The parameter whose gradient tells the steps apart, once one was found."""
        return self._param() if self._param is not None else None

    def note(self, moved: bool) -> str | None:
        """What the report says once the boundary is decided or ``moved`` to the optimizer."""
        if self.kind == "optimizer":
            return (
                "the step boundary moved to optimizer.step() once the script began calling it"
                if moved
                else None
            )
        return self.describe()

    def describe(self) -> str | None:
        """What the report says of a boundary other than the optimizer's, or ``None``."""
        if self.kind == "backward" and self.never_updates:
            return (
                "no optimizer.step() seen and the parameters never change: a step is one "
                "backward call of the loss (the loop computes gradients and trains nothing)"
            )
        if self.kind == "backward":
            per = self.backwards_per_step
            calls = "call" if per == 1 else f"{per} calls"
            return (
                f"no optimizer.step() seen: a step is one backward {calls} of the loss (the "
                "script changes its gradients between steps, so it updates the parameters itself)"
            )
        if self.kind == "forward":
            return (
                "no optimizer.step() and no backward call seen: a step is one call of the "
                "outermost model"
            )
        return None

    # --- the gradients' state ---------------------------------------------------------------

    def _grads_changed(self) -> bool:
        param = self._param() if self._param is not None else None
        return param is not None and _grad_state(param) != self._grad_state

    def _remember_grad(self, parameters: Callable[[], Iterable[Any]]) -> None:
        param = self._param() if self._param is not None else None
        if param is None:  # the first parameter with a gradient tells the steps apart
            param = next((p for p in parameters() if getattr(p, "grad", None) is not None), None)
            if param is None:
                return
            self._param = weakref.ref(param)
            self._param_values = _sample(param)
        self._grad_state = _grad_state(param)

    def _params_changed(self) -> bool:
        """Whether the watched parameter's first values moved since it was first seen (an
        update through ``p.data`` bumps no version counter, so the values are compared)."""
        param = self._param() if self._param is not None else None
        if param is None or self._param_values is None:
            return False
        return not bool((_sample(param) == self._param_values).all())


def _grad_state(param: Any) -> tuple[int, int]:
    """Which gradient tensor the parameter holds and its version: both change when it is
    cleared (set to ``None``, then made anew), zeroed or clipped in place."""
    grad = param.grad
    if grad is None:
        return (0, -1)
    return (id(grad), grad._version)


def _sample(param: Any) -> Any:
    """A copy of a parameter's first few values (cheap, once per check)."""
    return param.detach().reshape(-1)[:8].clone()


def graph_leaves(tensors: Any, limit: int = 10_000) -> Iterator[Any]:
    """The leaves (parameters) of the autograd graph behind ``tensors``, for loops that train
    plain tensors without a module; at most ``limit`` graph nodes are visited."""
    roots = tensors if isinstance(tensors, (list, tuple)) else [tensors]
    stack = [getattr(t, "grad_fn", None) for t in roots]
    seen: set[int] = set()
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)  # AccumulateGrad: a leaf that gets .grad
        if variable is not None:
            yield variable
            continue
        stack.extend(fn for fn, _ in getattr(node, "next_functions", ()))
