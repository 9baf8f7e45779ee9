"""The session's hooks on PyTorch: each one times its part of the step and moves the boundary.

Split from :mod:`._session` (which installs them and runs the phase table): the forward,
optimizer, backward and DataLoader hooks, and how a step ends from inside them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._batches import tensor_ids
from ..loader import valid_loader_kwargs
from ._boundary import graph_leaves
from .phases import NOT_SERVED, Done


class StopRun(BaseException):
    """Raised into the user's script to stop it once the measurement is done.

    A ``BaseException``, so a ``try/except Exception`` in the user's loop does not swallow it.
    """


class StepHooks:
    """The hooks of :class:`~torchdoctor.capture.CaptureSession` (a mixin: they read its state)."""

    # Set by the session.
    phase: Any
    data: Any
    boundary: Any
    options: Any
    parallel: Any

    # --- hooks ------------------------------------------------------------------------------

    def _timed(self, part: str, fn: Callable, *args, **kwargs):
        self._check_done()
        self.push(part)
        try:
            if part == "to_device" and self.sync_watcher is not None:
                # The batch copy is the "to device" part, not a finding; the watcher still
                # notes the batch as moved.
                with self.sync_watcher.ignore():
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)
        finally:
            self.pop(part)

    def _forward_pre(self, module, args) -> None:
        if self._module_depth == 0:
            self._settle()
            self._check_done()
            if self._global_forward_hooks and module not in self._root_modules:
                self._root_modules.add(module)
            self.data.seen["forward_calls"] += 1
            kind = self.boundary.kind
            if kind in (None, "forward") and self.boundary.forward_starting(
                torch.is_grad_enabled(), self.data.seen["backward_calls"] > 0
            ):
                if kind is None:
                    self._boundary_decided()
                self._end_step()
            self.parallel.forward_starting(module, self.phase.measuring)
            if self.inputs.searching:
                self.inputs.model_called(args, self.patcher, self)
            self.push("forward")
        self._module_depth += 1

    def _forward_post(self, module, args, output) -> None:
        self._module_depth = max(self._module_depth - 1, 0)
        if self._module_depth == 0:
            self.pop("forward")

    def _optimizer_pre(self, optimizer, args, kwargs) -> None:
        self._check_done()
        self.optimizers.seen(optimizer)
        if self._optimizer_depth == 0:
            self.parallel.optimizer_stepping(self.root_modules(), self.phase.measuring)
        self._optimizer_depth += 1
        self.push("optimizer")

    def _optimizer_post(self, optimizer, args, kwargs) -> None:
        self._optimizer_depth = max(self._optimizer_depth - 1, 0)
        self.pop("optimizer")
        self.data.seen["optimizer_steps"] += 1
        if self._optimizer_depth == 0 and self.optimizers.is_step_end(optimizer, self.clock):
            if self.boundary.optimizer_stepped():
                self._boundary_decided(moved=True)
            self._end_step()

    def _backward_starting(self) -> None:
        self._settle()
        self._check_done()
        boundary = self.boundary
        before = boundary.kind
        if before != "optimizer" and boundary.backward_starting():
            self._boundary_decided(moved=before is not None)

    def _backward_ended(self, tensors: Any) -> None:
        # Ended at the script's next call of interest, not here: under a torch function mode (the
        # sync finder's) backward runs with that mode taken off the stack, so no phase may end now.
        if self.boundary.kind != "optimizer":
            self._step_pending = self.boundary.backward_ended(lambda: self._parameters(tensors))

    def _settle(self) -> None:
        """End the step whose last backward call has returned (loops without an optimizer)."""
        if self._step_pending:
            self._step_pending = False
            self._end_step()

    def _parameters(self, tensors: Any = None):
        """The outermost modules' parameters, then (loops without modules) the loss's leaves."""
        for module in list(self._root_modules):
            yield from module.parameters()
        if tensors is not None:
            yield from graph_leaves(tensors)

    def _boundary_decided(self, moved: bool = False) -> None:
        """A loop without an optimizer showed its boundary, or an optimizer took it over."""
        text = self.boundary.note(moved)
        if self.boundary.kind != "optimizer":
            watched = self.boundary.watched()
            self.clock.detect(self._parameters() if watched is None else [watched])
        if text is not None and text not in self.data.notes:
            self.data.notes.append(text)
        if moved and self.phase.name == "warmup":
            self.phase.steps_done = 0  # steps cut at the old boundary do not count

    def _end_step(self) -> None:
        try:
            self._on_step_end()
        except StopRun:
            raise
        except Exception as exc:  # noqa: BLE001 - our bug must not look like the user's
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        """torchdoctor itself failed: stop measuring and stop the script cleanly."""
        self.data.internal_error = exc
        self.phase = Done()
        raise StopRun() from exc

    def _next_batch(self, it, orig_next):
        self._settle()
        self._check_done()
        phase = self.phase
        if not phase.takes_steps:
            return orig_next(it)  # torchdoctor's own clones (loader-alone, loader doctor)
        dataset_key = id(getattr(it, "_dataset", it))
        batch = phase.next_batch(self, dataset_key)
        if batch is NOT_SERVED:
            self.push("data_wait")
            try:
                batch = orig_next(it)
            finally:
                self.pop("data_wait")
            self.data.seen["batches"] += 1
            if phase.measuring:
                self.loaders.count_measured_batch(dataset_key)
            self.replay.keep(dataset_key, batch, measuring=phase.measuring)
            self.loaders.sized(dataset_key, batch)
        self._step_batches += 1
        self._batch_ids = tensor_ids(batch)
        return batch

    def _overrides_for(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return valid_loader_kwargs({**kwargs, **self.options.loader_overrides})

    def _check_done(self) -> None:
        if isinstance(self.phase, Done) and self.options.stop:
            raise StopRun()
