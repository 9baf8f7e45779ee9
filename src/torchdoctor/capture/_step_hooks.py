"""The session's hooks on PyTorch: each one times its part of the step and moves the boundary.

Split from :mod:`._session` (which installs them and runs the phase table): the forward,
optimizer, backward and DataLoader hooks, and how a step ends from inside them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from threading import get_ident
from typing import TYPE_CHECKING, Any

import torch

from .._batches import tensor_ids
from ..loader import valid_loader_kwargs
from ..record import phase_names
from ._boundary import graph_leaves
from ._cost import cost_clock_ns, costed
from ._loop_shapes import (
    evaluating,
    evaluation_sites,
    never_updates_finding,
    time_direct_forwards,
    trainable,
)
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
    from ._session import CaptureSession
    from ._sync_watcher import SyncWatcher
    from ._whole import WholeRunWatch
    from ._whole_stand_in import NoWholeRun
    from .phases import Phase, PhaseSession


class StopRun(BaseException):
    """Raised into the user's script to stop it once the measurement is done.

    A ``BaseException``, so a ``try/except Exception`` in the user's loop does not swallow it.
    """


class StepHooks:
    """The session's hooks on torch: an object the session holds (:attr:`CaptureSession.hooks`),
    handed to torch as its bound methods.

    What the hooks read of the session is bound once, here, to a member of their own (the
    session's instruments are fixed for its life), so a hook reads ``self.data``, not
    ``self.session.data``: their cost per step is judged in instructions
    (benchmarks/capture_instructions.py). The state that changes as the run goes (the phase, the
    lent sync watcher, ``lean``, where ``push`` and ``pop`` go) is the hooks' own, and the
    session sets it through its properties. Everything the hooks use is declared here, typed;
    ``tests/unit/capture/test_session_surface.py`` fails on a member used and not declared.
    """

    # --- bound once: the session's instruments -------------------------------------------------
    options: RunOptions
    data: CaptureData
    boundary: StepBoundary
    parallel: ParallelWatch
    patcher: Patcher
    clock: DeviceClock
    clock_ns: Callable[[], int]
    loaders: LoaderTracker
    replay: ReplayStore
    passes: ServedPasses
    inputs: BuiltInputs
    optimizers: OptimizerTracker
    state: ScriptState
    #: ``run --whole``'s watch, or its passive stand-in (:class:`._whole.NoWholeRun`): the hooks
    #: tell it what they see either way.
    whole: WholeRunWatch | NoWholeRun
    #: The session, for the phases' calls (a phase sees the session, not its hooks).
    session: PhaseSession
    #: The session's step end (runs the phase table).
    _on_step_end: Callable[[], None]

    # --- set by the session as the run goes ---------------------------------------------------
    phase: Phase
    #: Lent by the sync-sample phase: a batch's copy is not a sync finding.
    sync_watcher: SyncWatcher | None
    #: ``run --whole`` after its measured steps: batches are only counted (no batch kept).
    lean: bool
    stop_when_done: bool  # stop once the phases are done (not while a rank waits in Join)
    #: A step's part starts and ends: the timeline's own, or the session's labelling ones while
    #: the trace phase lends a profiler (:class:`._labels.LabelledParts`).
    push: Callable[[str], None]
    pop: Callable[[str], None]

    # --- state the hooks share (with ``_hooks`` and ``_inputs``) ------------------------------
    #: Inside an input builder of the loop (what it copies is input).
    building: int
    #: The ids of the current batch's tensors (their copies are ``to_device``).
    batch_ids: set[int]
    #: Inside ``autograd.backward`` (a backward inside it is reentrant checkpointing).
    backward_depth: int

    # --- the hooks' own state ----------------------------------------------------------------
    #: The thread that runs the script's training loop: the only one the hooks measure and the
    #: only one :class:`StopRun` is raised in. ``None`` in a process forked from it.
    _owner_thread: int | None
    #: torchdoctor's own time in its hooks since the last step ended (ns; see :mod:`._cost`).
    _cost_ns: int
    #: Pairs of reads of the cost clock that timed ``_cost_ns`` (net: a pair taken out, less one).
    _cost_reads: int
    #: The hooks time themselves in this step (see :mod:`._cost`).
    _costing: bool
    #: When ``_costing`` last turned on (ns): a hook that started untimed counts from there.
    _timed_from: int
    _module_depth: int
    #: The part an outermost module call is timed as: ``forward``, or ``evaluation``.
    _forward_part: str
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

    def __init__(self, session: CaptureSession, whole: WholeRunWatch | NoWholeRun) -> None:
        self.session = session
        self.options = session.options
        self.stop_when_done = session.options.stop
        self.data = session.data
        self.boundary = session.boundary
        self.parallel = session.parallel
        self.patcher = session.patcher
        self.clock = session.clock
        self.clock_ns = session.clock_ns
        self.loaders = session.loaders
        self.replay = session.replay
        self.passes = session.passes
        self.inputs = session.inputs
        self.optimizers = session.optimizers
        self.state = session.state
        self.whole = whole
        self._on_step_end = session._on_step_end
        self.phase = session.table[0]
        self.sync_watcher = None
        self.lean = False
        self.push, self.pop = session.push, session.pop

        self.building = 0
        self.batch_ids = set()
        self.backward_depth = 0
        self._owner_thread = get_ident()
        self._cost_ns = 0
        self._cost_reads = 0
        self._costing = True
        self._timed_from = 0
        self._module_depth = 0
        self._forward_part = "forward"
        self._optimizer_depth = 0
        self._producing = 0
        self._quiet_depth = 0
        self._step_pending = False
        self._step_batches = 0
        self._global_forward_hooks = []
        self._root_modules = weakref.WeakSet()
        self._trainable_root_seen = False
        self._boundary_notes = []
        self._direct_forwards = []
        self._direct_searched = weakref.WeakSet()
        self._direct_note = False

    def foreign(self) -> bool:
        """Whether the caller is outside the script's training thread: a DataLoader worker (a
        process forked from the script's), or a thread of the script's or of torch's."""
        return get_ident() != self._owner_thread

    def root_modules(self) -> list[torch.nn.Module]:
        """The outermost modules the script has called so far (found during warmup)."""
        return list(self._root_modules)

    # --- hooks ------------------------------------------------------------------------------

    @costed
    def time_part(self, part: str, fn: Callable, *args, **kwargs):
        if isinstance(self.phase, Done) and self.stop_when_done:
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
        started = cost_clock_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            self._cost_ns -= cost_clock_ns() - started
            self._cost_reads += 1  # its reads lie inside the hook's pair: one more, net

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
            if isinstance(self.phase, Done) and self.stop_when_done:
                raise StopRun()
            if self._global_forward_hooks and module not in self._root_modules:
                self._root_modules.add(module)
                if not self._trainable_root_seen and trainable(module):
                    self._trainable_root_seen = True
            self.data.seen["forward_calls"] += 1
            kind = self.boundary.kind
            if (
                kind in (None, "forward")
                and self._optimizer_depth == 0  # an L-BFGS closure's call is part of its step
                and self.boundary.forward_starting(
                    torch.is_grad_enabled(),
                    self.data.seen["backward_calls"] > 0,
                    trainable=kind is not None or trainable(module),
                    batches=self.data.seen["batches"] if self.data.seen["dataloaders"] else None,
                )
            ):
                if kind is None:
                    self._boundary_decided()
                self._end_step()
            self.parallel.forward_starting(module, self.phase.measuring)
            if (
                (self.phase.probes or self.phase.measuring)
                and self.state.wants_forward(module)
                and trainable(module)
                and module.training
                and torch.is_grad_enabled()
            ):  # a training forward: an evaluation pass is not where the model trains
                self.state.probe_forward(module, self.clock.device)
            if self.inputs.searching:
                self.inputs.model_called(args, self.patcher, self)
            self.whole.forward_started(module.training)
            # a validation pass inside the step is its own part, not the training forward's
            evaluates = evaluating(module, kind, self.optimizers)
            self._forward_part = "evaluation" if evaluates else "forward"
            if evaluates:  # where, and in which step: a place may evaluate every k steps only
                self.data.evaluations.started(evaluation_sites(), self.clock_ns())
            self.push(self._forward_part)
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
            if self._forward_part == "evaluation":
                self.data.evaluations.ended(self.clock_ns())
            self.pop(self._forward_part)
            self.whole.forward_ended(call_site)

    @costed
    def _optimizer_pre(self, optimizer, args, kwargs) -> None:
        if get_ident() != self._owner_thread:  # foreign(), inlined: hooks run every step
            return
        if isinstance(self.phase, Done) and self.stop_when_done:  # check_done(), inlined
            raise StopRun()
        self.optimizers.seen(optimizer)
        self.whole.training()
        if self._optimizer_depth == 0 and (self.phase.probes or self.phase.measuring):
            if self.phase.measuring:
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
            time_direct_forwards(self, optimizer)
        if self._optimizer_depth == 0 and self.optimizers.is_step_end(optimizer, self.clock):
            if self.boundary.optimizer_stepped(type(optimizer).__name__):
                self._boundary_decided(moved=True)
            self._end_step()

    @costed
    def backward_starting(self) -> None:
        if self._step_pending:
            self.settle()
        if isinstance(self.phase, Done) and self.stop_when_done:  # check_done(), inlined
            raise StopRun()
        self.whole.backward_started()
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
        self.data.evaluations.step += 1
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
        if isinstance(self.phase, Done) and self.stop_when_done:  # check_done(), inlined
            raise StopRun()
        phase = self.phase
        if not phase.takes_steps:
            return self._own(orig_next, it)  # torchdoctor's clones (loader-alone, loader doctor)
        dataset_key = loader_key(it)
        batch = phase.next_batch(self.session, dataset_key)
        if batch is not NOT_SERVED:
            self.passes.serving(it)  # the pass ends where the loader's would (timm's len())
        else:
            self.passes.loading(it)
            whole = self.whole
            whole.batch_requested(dataset_key)
            self.push("data_wait")
            self._producing += 1
            try:
                batch = self._own(orig_next, it)
            except StopIteration:
                whole.loader_exhausted(dataset_key)
                raise
            finally:
                self._producing -= 1
                self.pop("data_wait")
            whole.batch_returned(dataset_key)
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

    def check_done(self) -> None:
        if isinstance(self.phase, Done) and self.stop_when_done:
            raise StopRun()
