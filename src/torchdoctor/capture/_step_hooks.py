"""The session's hooks on PyTorch: each one times its part of the step and moves the boundary.

Split from :mod:`._session` (which installs them and runs the phase table): the forward,
optimizer, backward and DataLoader hooks, and how a step ends from inside them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from threading import get_ident
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import torch

from .._batches import tensor_ids
from ..loader import valid_loader_kwargs
from ..record import Finding, phase_names
from ._boundary import graph_leaves
from ._cost import costed
from ._patch import passes_through
from ._script_state import call_site
from ._whole import loader_key
from .phases import NOT_SERVED, Done

if TYPE_CHECKING:
    from ..options import RunOptions
    from ._boundary import StepBoundary
    from ._data import CaptureData
    from ._device import DeviceClock
    from ._inputs import BuiltInputs
    from ._loaders import LoaderTracker, ReplayStore, ServedPasses
    from ._optimizers import OptimizerTracker
    from ._parallel import ParallelWatch
    from ._patch import Patcher
    from ._script_state import ScriptState
    from ._sync_watcher import SyncWatcher
    from ._whole import WholeRunWatch
    from .phases import Phase


def never_updates_finding(site: Any) -> Finding:
    """A loop whose backward calls never change a parameter: it trains nothing."""
    return Finding(
        kind="loop.never-updates",
        title="parameters never change: no optimizer.step() and no in-place update after the "
        "backward calls",
        fix="# build an optimizer and step it after the backward, or update the parameters\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "loss.backward()\n"
        "optimizer.step()\n"
        "optimizer.zero_grad()",
        file=site.file if site is not None else None,
        line=site.line if site is not None else None,
        source=site.source if site is not None else None,
        severity="critical",
    )


def _trainable(module: Any) -> bool:
    """Whether a module has a parameter that takes gradients (a transform or a loss has none)."""
    return any(p.requires_grad for p in module.parameters())


def trained_modules(optimizer: Any) -> list[Any]:
    """The outermost modules all of whose trainable parameters ``optimizer`` updates.

    Found once per optimizer, among the live modules (a walk of the garbage collector's objects).
    """
    import gc

    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    candidates = []
    module_type = torch.nn.Module
    for obj in gc.get_objects():
        # issubclass of the type: isinstance would read ``__class__``, a property on some
        # lazily deprecated objects that warns
        if issubclass(type(obj), module_type):
            own = [id(p) for p in obj.parameters() if p.requires_grad]
            if own and all(i in params for i in own):
                candidates.append(obj)
    inner = {id(m) for c in candidates for m in c.modules() if m is not c}
    return [m for m in candidates if id(m) not in inner]


def _timed_forward(session: Any, module: Any) -> Callable[..., Any]:
    forward = module.forward

    def timed_forward(*args, **kwargs):
        session.forward_pre(module, args)
        try:
            return forward(*args, **kwargs)
        finally:
            session.forward_post(module, args, None)

    return timed_forward


class StopRun(BaseException):
    """Raised into the user's script to stop it once the measurement is done.

    A ``BaseException``, so a ``try/except Exception`` in the user's loop does not swallow it.
    """


class StepHooks:
    """The hooks of :class:`~torchdoctor.capture.CaptureSession` (a mixin: they read its state).

    Everything the hooks use is declared here, typed: the session's members (set in its
    ``__init__``), the methods it provides, and the state the hooks share with the patched torch
    functions of ``_hooks`` and the input builders of ``_inputs`` (``building``, ``batch_ids``,
    ``backward_depth``). ``tests/unit/capture/test_session_surface.py`` fails on a member used
    and not declared.
    """

    # --- the session's members ---------------------------------------------------------------
    options: RunOptions
    data: CaptureData
    phase: Phase
    boundary: StepBoundary
    parallel: ParallelWatch
    whole: WholeRunWatch | None
    patcher: Patcher
    clock: DeviceClock
    clock_ns: Callable[[], int]
    loaders: LoaderTracker
    replay: ReplayStore
    passes: ServedPasses
    inputs: BuiltInputs
    optimizers: OptimizerTracker
    state: ScriptState
    #: Lent by the sync-sample phase: a batch's copy is not a sync finding.
    sync_watcher: SyncWatcher | None
    #: ``run --whole`` after its measured steps: batches are only counted (no batch kept).
    lean = False

    # --- the session's methods the hooks call ------------------------------------------------
    foreign: Callable[[], bool]
    push: Callable[[str], None]
    pop: Callable[[str], None]
    root_modules: Callable[[], list[torch.nn.Module]]
    _on_step_end: Callable[[], None]

    # --- state the hooks share (with ``_hooks`` and ``_inputs``) ------------------------------
    #: Inside an input builder of the loop (what it copies is input).
    building: int
    #: The ids of the current batch's tensors (their copies are ``to_device``).
    batch_ids: set[int]
    #: Inside ``autograd.backward`` (a backward inside it is reentrant checkpointing).
    backward_depth: int

    # --- the hooks' own state ----------------------------------------------------------------
    #: The thread that runs the script's training loop (see :meth:`CaptureSession.foreign`).
    _owner_thread: int | None
    #: torchdoctor's own time in its hooks since the last step ended (ns; see :mod:`._cost`).
    _cost_ns: int
    #: The hooks time themselves in this step (see :mod:`._cost`).
    _costing: bool = True
    #: When ``_costing`` last turned on (ns): a hook that started untimed counts from there.
    _timed_from: int = 0
    _module_depth: int
    _optimizer_depth: int
    #: Inside the DataLoader's ``__next__`` (its transforms are input, not the model), and module
    #: calls ignored for it.
    _producing: int
    _quiet_depth: int
    _step_pending: bool
    _step_batches: int
    _global_forward_hooks: list[Any]
    _root_modules: weakref.WeakSet[torch.nn.Module]
    #: A module with trainable parameters was called from the loop (found in warmup).
    _trainable_root_seen: bool
    #: The boundary's notes, removed when it moves.
    _boundary_notes: list[str]
    #: Modules timed through their ``forward`` (loops that call ``self.forward(x)``).
    _direct_forwards: list[str]
    _direct_searched: weakref.WeakSet[torch.nn.Module]
    _direct_note: bool
    #: ``run --whole``: when the outermost module call began, with grad on, in training mode.
    _forward_mode: tuple[int, bool, bool] | None = None

    # --- hooks ------------------------------------------------------------------------------

    @costed
    def time_part(self, part: str, fn: Callable, *args, **kwargs):
        if isinstance(self.phase, Done) and self.options.stop:
            raise StopRun()
        self.push(part)
        try:
            if part == "to_device" and self.sync_watcher is not None:
                # The batch copy is the "to device" part, not a finding; the watcher still
                # notes the batch as moved.
                with self.sync_watcher.ignore():
                    return self._own(fn, *args, **kwargs)
            return self._own(fn, *args, **kwargs)
        finally:
            self.pop(part)

    @passes_through
    def _own(self, fn: Callable, *args, **kwargs) -> Any:
        """The script's own work inside a costed hook (an original torch function, which may be
        written in C: its errors are its own): its time is not capture's."""
        if not self._costing:
            return fn(*args, **kwargs)
        started = perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            self._cost_ns -= perf_counter_ns() - started

    @costed
    def forward_pre(self, module, args) -> None:
        if get_ident() != self._owner_thread:  # foreign(), inlined: hooks run every step
            return
        if self._producing or self.building or self._quiet_depth:
            # A module the DataLoader or a batch builder calls (a torchvision-style transform):
            # input, not the model.
            self._quiet_depth += 1
            return
        if self._module_depth == 0:
            if self._step_pending:
                self.settle()
            if isinstance(self.phase, Done) and self.options.stop:
                raise StopRun()
            if self._global_forward_hooks and module not in self._root_modules:
                self._root_modules.add(module)
                if not self._trainable_root_seen and _trainable(module):
                    self._trainable_root_seen = True
            self.data.seen["forward_calls"] += 1
            kind = self.boundary.kind
            if (
                kind in (None, "forward")
                and self._optimizer_depth == 0  # an L-BFGS closure's call is part of its step
                and self.boundary.forward_starting(
                    torch.is_grad_enabled(),
                    self.data.seen["backward_calls"] > 0,
                    trainable=kind is not None or _trainable(module),
                    batches=self.data.seen["batches"] if self.data.seen["dataloaders"] else None,
                )
            ):
                if kind is None:
                    self._boundary_decided()
                self._end_step()
            self.parallel.forward_starting(module, self.phase.measuring)
            if (
                self.phase.measuring
                and self.state.wants_forward(module)
                and _trainable(module)
                and module.training
                and torch.is_grad_enabled()
            ):  # a training forward: an evaluation pass is not where the model trains
                device = self.clock.device
                self.state.probe_forward(module, device.type if device is not None else "cpu")
            if self.inputs.searching:
                self.inputs.model_called(args, self.patcher, self)
            if self.whole is not None:
                self._forward_mode = (self.clock_ns(), torch.is_grad_enabled(), module.training)
            self.push("forward")
        self._module_depth += 1

    @costed
    def forward_post(self, module, args, output) -> None:
        if get_ident() != self._owner_thread:  # foreign(), inlined: hooks run every step
            return
        if self._quiet_depth:
            self._quiet_depth -= 1
            return
        if self._module_depth > 0:
            self._module_depth -= 1
        if self._module_depth == 0:
            self.pop("forward")
            if self.whole is not None and self._forward_mode is not None:
                start, grad, training = self._forward_mode
                self.whole.forward(start, self.clock_ns(), grad, training, call_site)
                self._forward_mode = None

    @costed
    def _optimizer_pre(self, optimizer, args, kwargs) -> None:
        if get_ident() != self._owner_thread:  # foreign(), inlined: hooks run every step
            return
        if isinstance(self.phase, Done) and self.options.stop:  # check_done(), inlined
            raise StopRun()
        self.optimizers.seen(optimizer)
        if self.whole is not None:
            self.whole.training(self.clock_ns())
        if self._optimizer_depth == 0 and self.phase.measuring:
            self.parallel.optimizer_stepping(self.root_modules)
            if not self.state.optimizer_probed and optimizer is self.optimizers.primary:
                self.state.probe_optimizer(optimizer)
        self._optimizer_depth += 1
        self.push("optimizer")

    @costed
    def _optimizer_post(self, optimizer, args, kwargs) -> None:
        if get_ident() != self._owner_thread:  # foreign(), inlined: hooks run every step
            return
        if self._optimizer_depth > 0:
            self._optimizer_depth -= 1
        self.pop("optimizer")
        self.data.seen["optimizer_steps"] += 1
        seen = self.data.seen
        if self._optimizer_depth == 0 and (
            self._direct_forwards or (not self._trainable_root_seen and seen["backward_calls"])
        ):
            # Gradients came from a backward, yet no module with parameters was called (at most
            # a ReLU inside): the model runs through ``self.forward(x)``.
            self._time_direct_forwards(optimizer)
        if self._optimizer_depth == 0 and self.optimizers.is_step_end(optimizer, self.clock):
            if self.boundary.optimizer_stepped(type(optimizer).__name__):
                self._boundary_decided(moved=True)
            self._end_step()

    @costed
    def backward_starting(self) -> None:
        if self._step_pending:
            self.settle()
        if isinstance(self.phase, Done) and self.options.stop:  # check_done(), inlined
            raise StopRun()
        if self.whole is not None:
            self.whole.backward_started(self.clock_ns())
        boundary = self.boundary
        before = boundary.kind
        if self._optimizer_depth:
            return  # a closure's backward, inside the optimizer's step: that step is the boundary
        if before != "optimizer" and boundary.backward_starting():
            self._boundary_decided(moved=before is not None)

    @costed
    def backward_ended(self, tensors: Any) -> None:
        # Ended at the script's next call of interest, not here: under a torch function mode (the
        # sync finder's) backward runs with that mode taken off the stack, so no phase may end now.
        if self.boundary.kind != "optimizer" and not self._optimizer_depth:
            self._step_pending = self.boundary.backward_ended(lambda: self._parameters(tensors))

    def settle(self) -> None:
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
        # The notes describe the boundary the run ended with, not one it left behind.
        for stale in self._boundary_notes:
            if stale in self.data.notes:
                self.data.notes.remove(stale)
        self._boundary_notes = []
        if text is not None and text not in self.data.notes:
            self.data.notes.append(text)
            self._boundary_notes.append(text)
        if moved and self.phase.name == phase_names.WARMUP:
            self.phase.steps_done = 0  # steps cut at the old boundary do not count
        if self.boundary.never_updates and not self.data.loop_findings:
            self.data.loop_findings.append(never_updates_finding(call_site()))

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

    @costed
    def serve_batch(self, it, orig_next):
        if self._step_pending:
            self.settle()
        if isinstance(self.phase, Done) and self.options.stop:  # check_done(), inlined
            raise StopRun()
        phase = self.phase
        if not phase.takes_steps:
            return self._own(orig_next, it)  # torchdoctor's clones (loader-alone, loader doctor)
        dataset_key = loader_key(it)
        batch = phase.next_batch(self, dataset_key)
        if batch is not NOT_SERVED:
            self.passes.serving(it)  # the pass ends where the loader's would (timm's len())
        else:
            self.passes.loading(it)
            whole = self.whole
            if whole is not None:
                whole.batch_requested(dataset_key, self.clock_ns())
            self.push("data_wait")
            self._producing += 1
            try:
                batch = self._own(orig_next, it)
            except StopIteration:
                if whole is not None:
                    whole.loader_exhausted(dataset_key, self.clock_ns())
                raise
            finally:
                self._producing -= 1
                self.pop("data_wait")
            if whole is not None:
                whole.batch_returned(dataset_key, self.clock_ns())
            self.data.seen["batches"] += 1
            if self.lean:  # run --whole after its measured steps: counted only
                self._step_batches += 1
                return batch
            if phase.measuring:
                self.loaders.count_measured_batch(dataset_key)
            self.replay.keep(dataset_key, batch, measuring=phase.measuring)
            self.loaders.sized(dataset_key, batch)
        self._step_batches += 1
        self.batch_ids = tensor_ids(batch)
        return batch

    def overrides_for(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return valid_loader_kwargs({**kwargs, **self.options.loader_overrides})

    def _time_direct_forwards(self, optimizer: Any) -> None:
        """A loop whose model runs through ``self.forward(x)`` (no module call, so no module hook
        fires): time the modules this optimizer trains by wrapping their ``forward``."""
        if optimizer in self._direct_searched:
            return
        self._direct_searched.add(optimizer)
        modules = trained_modules(optimizer)
        for module in modules:
            self.patcher.set(module, "forward", _timed_forward(self, module))
            self._direct_forwards.append(type(module).__name__)
        if modules and not self._direct_note:
            self._direct_note = True
            self.data.notes.append(
                "the model is run through its forward() method, not by calling the module, so "
                "module hooks never fire: torchdoctor timed the forward() of the modules each "
                f"optimizer trains ({', '.join(dict.fromkeys(self._direct_forwards))})"
            )

    def check_done(self) -> None:
        if isinstance(self.phase, Done) and self.options.stop:
            raise StopRun()
