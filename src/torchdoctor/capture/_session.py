"""The live capture: hooks PyTorch inside the user's process to time each training step.

What is hooked, and why each is safe to undo:

- ``DataLoader.__iter__`` and ``_BaseDataLoaderIter.__next__`` (patched): which loaders exist,
  how long the loop blocks for a batch (``data_wait``), and the batches themselves, which the
  model-alone phase replays;
- ``torch.Tensor.to`` / ``.cuda`` (patched): copies of a batch's tensors are ``to_device``;
- global module forward pre/post hooks (registered): the outermost module call is ``forward``;
- ``torch.autograd.backward`` (patched; ``Tensor.backward`` calls it) and
  ``torch.autograd.grad`` (patched): ``backward``;
- global optimizer step pre/post hooks (registered): ``optimizer``, and the step boundary.

A step is one ``step()`` of the first optimizer seen; in loops without an optimizer, the loss's
backward call(s), or a call of the outermost module (:mod:`._boundary`). The session runs a table
of phases (:data:`.phases.PHASES`: warmup, sync finder, trace, measure, model-alone, no-sync,
flops, trials, worker sweep, loader-alone, loader doctor), handing each finished step to the
current one; after the last, :class:`StopRun` is raised into the script. What was measured sits in :attr:`CaptureSession.data`.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.autograd.profiler as _autograd_profiler
import torch.nn.modules.module as _module_mod
import torch.optim.optimizer as _optim_mod
import torch.utils.data.dataloader as _dl_mod

from ..analysis.verdict import INPUT_BOUND, summarise
from ..options import RunOptions
from ..record import RunRecord, StepSeries
from ._boundary import StepBoundary
from ._cost import CostSample, cost_clock_ns
from ._data import CaptureData, StepMarks
from ._device import DeviceClock
from ._hooks import patch_torch
from ._inputs import BuiltInputs
from ._job_guards import guard_job
from ._labels import LabelledParts
from ._loaders import LoaderTracker, ReplayStore, ServedPasses
from ._optimizers import OptimizerTracker
from ._parallel import ParallelWatch
from ._patch import Patcher
from ._processes import ProcessWatch
from ._ranks import Ranks
from ._sampler import SystemSampler
from ._script_state import ScriptState
from ._step_hooks import StepHooks, StopRun
from ._threads import hold_threads
from ._timeline import StepTimeline, parts_from_marks
from ._whole import WholeRunWatch
from ._whole_stand_in import NoWholeRun
from .phases import PHASES, WHOLE_PHASES, Done, Phase, watch_whole_run

ProgressFn = Callable[[str, int, int], None]
#: Told ``("phase", session, phase, None)`` when a phase starts and ``("step", session, phase,
#: step)`` when a step ends: how a supervised run streams its measurements out as they are made.
Listener = Callable[[str, "CaptureSession", Phase, "StepMarks | None"], None]

_session: CaptureSession | None = None
#: The job's own group's timeout when the run has no bound (``run --whole``).
UNBOUNDED_RANKS_TIMEOUT_S = 1800.0


def active_session() -> CaptureSession | None:
    """The installed session, if any (one per process)."""
    return _session


class CaptureSession(LabelledParts):
    """Installs the hooks (:attr:`hooks`), runs the phase table, and keeps what was measured in
    :attr:`data`."""

    def __init__(
        self,
        options: RunOptions,
        progress: ProgressFn | None = None,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        phases: Sequence[type[Phase]] = PHASES,
        listener: Listener | None = None,
    ) -> None:
        self.options = options
        self._listener = listener
        self._progress = progress or (lambda phase, done, total: None)
        self.clock_ns = clock_ns
        self.patcher = Patcher()
        self.data = CaptureData()
        self.timeline = StepTimeline(clock_ns)
        self.clock = DeviceClock(self.timeline)
        self.loaders = LoaderTracker(self.data.seen)
        self.replay = ReplayStore(max_batches=options.steps)
        self.passes = ServedPasses()
        self.inputs = BuiltInputs(max_kept=options.steps, notes=self.data.notes)
        self.sampler = SystemSampler()
        #: This process's rank in a job launched by torchrun, and the job's own gloo group.
        self.ranks = Ranks(timeout_s=options.max_seconds or UNBOUNDED_RANKS_TIMEOUT_S)
        self.parallel = ParallelWatch()
        self.processes = ProcessWatch(self.data.seen, self.data.notes)
        #: What the script already does (autocast, names), so a trial never advises it.
        self.state = ScriptState()
        if options.whole and phases is PHASES:
            phases = WHOLE_PHASES
        self.table: list[Phase] = [cls() for cls in phases]
        self._started: list[Phase] = []
        #: The dataset whose batches the model-alone phase and the worker sweep serve.
        self.main_dataset: int | None = None
        self._profiler: Any = None
        self._labels: list[Any] = []
        self.original_next: Callable[[Any], Any] = _dl_mod._BaseDataLoaderIter.__next__
        self.optimizers = OptimizerTracker(self.data)
        self.boundary = StepBoundary()
        #: Steps of the current measuring phase the script's own profiler recorded.
        self._script_profiled = 0
        self._cost_sample = CostSample()
        self.started_ns = clock_ns()
        #: ``run --whole``'s accountant, for readers outside the hooks: None in any other run
        #: (the hooks hold it, or its passive stand-in, as ``hooks.whole``).
        self.whole: WholeRunWatch | None = None
        self.profiler = None  # push and pop go straight to the timeline
        #: The hooks on torch, bound to this session's instruments (see :class:`StepHooks`).
        self.hooks = StepHooks(self, NoWholeRun())

    # --- what the hooks hold, seen from the session ---------------------------------------------

    @property
    def phase(self) -> Phase:
        return self.hooks.phase

    @phase.setter
    def phase(self, phase: Phase) -> None:
        self.hooks.phase = phase

    @property
    def sync_watcher(self) -> Any:
        return self.hooks.sync_watcher

    @sync_watcher.setter
    def sync_watcher(self, watcher: Any) -> None:
        self.hooks.sync_watcher = watcher

    def parts_moved(self) -> None:
        """``push`` and ``pop`` changed (a profiler lent or taken back): the hooks call them."""
        if "hooks" in self.__dict__:  # else the hooks, made later, take them as they are
            self.hooks.push, self.hooks.pop = self.push, self.pop

    def time_part(self, part: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.hooks.time_part(part, fn, *args, **kwargs)

    # --- install / uninstall ----------------------------------------------------------------

    def install(self) -> None:
        """Install every hook; on failure, undo what was installed and re-raise."""
        global _session
        if _session is not None:
            raise RuntimeError("a torchdoctor capture is already active in this process")
        _session = self
        self.hooks._owner_thread = threading.get_ident()
        self.patcher.on_restore(_clear_session)
        self.patcher.own_process()
        try:
            self._install()
            self._enter(0)
        except BaseException:
            self.uninstall()
            raise

    def _install(self) -> None:
        if self.options.whole:
            self.whole = self.hooks.whole = watch_whole_run(self)
        patch_torch(self)
        self.patcher.keep_modules_picklable()
        self.parallel.install(self.patcher, collectives=self.ranks.launched)
        if self.ranks.launched:
            guard_job(self)  # Join's uneven inputs, and no save of drifted replicas
        # Global module hooks put every module call on torch's slow path (measured: 22% on an
        # 81-module MLP, benchmarks/capture_overhead.py). They find the outermost modules during
        # warmup; from the first measured step only those few carry hooks.
        hooks = self.hooks
        hooks._global_forward_hooks = [
            _module_mod.register_module_forward_pre_hook(hooks.forward_pre),
            _module_mod.register_module_forward_hook(hooks.forward_post, always_call=True),
        ]
        p = self.patcher
        p.on_restore(self._remove_global_forward_hooks)
        p.hook(_optim_mod.register_optimizer_step_pre_hook(hooks._optimizer_pre))
        p.hook(_optim_mod.register_optimizer_step_post_hook(hooks._optimizer_post))
        p.on_restore(self._stop_sampler)
        p.on_restore(self._close_phases)
        p.on_restore(self.inputs.stop_search)
        if self.options.threads_override is not None:  # the --fix re-run's set_num_threads(k)
            hold_threads(p, self.options.threads_override, self.data.notes)

    def uninstall(self) -> list[BaseException]:
        """Undo every patch and hook, and shut down DataLoader workers this run started."""
        errors = self.patcher.restore()
        self.shutdown_workers()
        self.loaders.release()
        return errors

    @property
    def installed(self) -> bool:
        return self.patcher.active

    @property
    def phase_name(self) -> str:
        return self.phase.name

    def shutdown_workers(self) -> None:
        """Stop the worker processes of every DataLoader iterator the script created."""
        self.loaders.shutdown_workers()
        self.replay.clear()
        self.inputs.clear()
        self.hooks.batch_ids.clear()
        gc.collect()

    # --- what phases use --------------------------------------------------------------------

    def progress(self, phase: str, done: int, total: int) -> None:
        self._progress(phase, done, total)

    def is_batch_tensor(self, tensor: torch.Tensor) -> bool:
        return id(tensor) in self.hooks.batch_ids

    def root_modules(self) -> list[torch.nn.Module]:
        """The outermost modules the script has called so far (found during warmup)."""
        return self.hooks.root_modules()

    def step_ms(self, step: StepMarks, device_events: bool = True) -> float:
        """A step's total time in ms (from device events, when the run uses them)."""
        return sum(self.step_parts(step, device_events).values())

    def step_parts(self, step: StepMarks, device_events: bool = True) -> dict[str, float]:
        """A step's time in ms by step part (from device events, when the run uses them)."""
        return parts_from_marks(step.marks, device_events and self.clock.uses_events)

    def wants_loader_doctor(self) -> bool:
        mode = self.options.loader_doctor
        if mode == "always":
            return self.loaders.main_loader() is not None
        if mode != "auto" or self.loaders.main_loader() is None:
            return False
        return self.provisional_verdict() == INPUT_BOUND

    def provisional_verdict(self) -> str:
        """The verdict the steps measured so far point to."""
        record = RunRecord(
            steps=self.measured_series(),
            model_alone=self.model_alone_step_ms(),
            loader=self.loaders.main_settings(),
            seen=dict(self.data.seen),
        )
        summarise(record)
        return record.verdict.kind if record.verdict else ""

    def watch_only(self) -> None:
        """``run --whole`` after its measured steps: the data-parallel findings read, then the
        steps only counted (the timeline keeps its parts, no marks; no batch kept)."""
        self._note_parallel()
        self.timeline.lean = self.hooks.lean = True
        self.hooks.batch_ids = set()
        self.restart_cost_sample()

    def restart_cost_sample(self) -> None:
        """A phase, or ``run --whole``'s measured window or watched steps, starts: the hooks'
        sample of timed steps starts again (its first steps timed, the first counted)."""
        self._cost_sample.phase_started()
        self._set_costing(self._cost_sample.next_timed())

    def _set_costing(self, timed: bool) -> None:
        """Whether the hooks time themselves from now on. A hook that started untimed and is
        running when this turns on (the step ended in it) times the rest of itself from here."""
        hooks = self.hooks
        if timed and not hooks._costing:
            hooks._timed_from = cost_clock_ns()
        hooks._costing = timed

    def hook_root_modules_only(self) -> None:
        """Swap the global module hooks for hooks on the outermost modules seen in warmup."""
        hooks = self.hooks
        if not hooks._global_forward_hooks or not hooks._root_modules:
            return
        for module in list(hooks._root_modules):
            self.patcher.hook(module.register_forward_pre_hook(hooks.forward_pre))
            self.patcher.hook(module.register_forward_hook(hooks.forward_post, always_call=True))
        self._remove_global_forward_hooks()

    # --- the phase table --------------------------------------------------------------------

    def _enter(self, index: int) -> None:
        """Start the first wanted phase from ``index`` on; after the last, stop the script."""
        for phase in self.table[index:]:
            if not self._agreed(phase, phase.wanted(self)):
                continue
            self.inputs.phase_starting(phase.name)
            self.phase = phase
            self._started.append(phase)
            phase.start(self)
            if self._listener is not None:
                self._listener("phase", self, phase, None)
            self.timeline.reset()
            if phase.takes_steps:
                self.restart_cost_sample()
                return
            self._end(phase)
        stop = self.options.stop and self.ranks.may_stop()  # not while a rank waits in Join
        self.phase, self.hooks.stop_when_done = Done(), stop  # Done once the ranks agreed
        if stop:
            raise StopRun()

    def _agreed(self, phase: Phase, wanted: bool) -> bool:
        """In a distributed job, a phase that takes steps runs only where every rank wants it."""
        if not phase.agreed or not self.ranks.launched:
            return wanted
        agreed = self.ranks.agree(wanted)  # StopRun when another rank has left the job
        if wanted and not agreed:
            phase.close(self)
            self.data.notes.append(f"{phase.name} phase skipped: {self.ranks.why_not_agreed()}")
        return agreed

    def _on_step_end(self) -> None:
        hooks = self.hooks
        step = StepMarks(self.timeline.cut(), hooks._step_batches)
        hooks._step_batches = 0
        phase = hooks.phase
        if isinstance(phase, Done):
            return
        self.inputs.step_ended(step.batches, phase.name, in_model=lambda: hooks._module_depth > 0)
        if phase.measuring and self._profiler is None and _autograd_profiler._is_profiler_enabled:
            self._script_profiled += 1  # the script's own torch.profiler records this step
        # What capture cost this step (the rest of this hook: the next's), when it counts.
        weight = self._cost_sample.step_ended(hooks._costing)
        if weight and (phase.measuring or hooks.lean):
            cost = self._cost_sample.counted_ns(hooks._cost_ns, hooks._cost_reads, weight)
            self.data.add_cost(cost, weight, watched=not phase.measuring)
        hooks._cost_ns = hooks._cost_reads = 0
        try:
            self._step_ended(phase, step)
        finally:
            self._set_costing(self._cost_sample.next_timed())

    def _step_ended(self, phase: Phase, step: StepMarks) -> None:
        self.hooks.whole.step_ended(step.marks[-1].host_ns)
        self.parallel.collectives.step_ended(phase.measuring)
        done = phase.on_step(self, step)
        if self._listener is not None:
            self._listener("step", self, phase, step)
        if not done:
            return
        # a phase's end and the next one's start happen between steps: no step's cost (the
        # hook around them counts them only when it was timed as it started, and a new phase
        # times the rest of the hook from its start on: see _set_costing)
        hooks = self.hooks
        timed, started = hooks._costing, cost_clock_ns()
        try:
            self._end(phase)
            self._enter(self.table.index(phase) + 1)
        finally:
            if timed:
                hooks._cost_ns -= cost_clock_ns() - started
                hooks._cost_reads -= 1

    def _end(self, phase: Phase) -> None:
        phase.finish(self)
        if phase.measuring:
            self._note_parallel()
            self._note_script_profiler(phase)
            if any(step.batches for step in self.data.measured):
                self.inputs.batches_drawn()  # notes describe the run as it ended
        self._started.remove(phase)
        phase.close(self)

    def _note_script_profiler(self, phase: Phase) -> None:
        if self._script_profiled:
            self.data.notes.append(
                f"the script's own torch.profiler was recording during {self._script_profiled} "
                f"of the {len(self.data.measured)} measured steps: their times include the profiler's cost, so "
                "the figures overstate the step (run without the profiler to measure training "
                "alone, or let torchdoctor record the trace: --trace DIR)"
            )
            self._script_profiled = 0

    def _close_phases(self) -> None:
        """On every ending: close the phases started and not ended (the script stopped early)."""
        while self._started:
            self._started.pop().close(self)

    def _note_parallel(self) -> None:
        """The data-parallel findings, read while the script's modules are alive (they are gone
        once the script is stopped)."""
        roots = self.root_modules()
        loader = self.loaders.main_settings()
        self.data.ddp_settings = self.parallel.ddp_settings(roots)
        self.data.parallel_findings = self.parallel.findings(
            roots,
            self.loaders.main_loader(),
            loader.created_at if loader is not None else None,
            self.ranks.world_size,
            self.ranks.local_rank,
            len(self.data.measured),
        )

    # --- results ----------------------------------------------------------------------------

    def measured_series(self) -> StepSeries:
        self.clock.synchronize()
        series = StepSeries()
        for step in self.data.measured:
            series.add_step(self.step_parts(step), step.batches)
        return series

    def model_alone_step_ms(self) -> list[float]:
        return [round(self.step_ms(step), 4) for step in self.data.model_alone]

    def measured_batches_per_step(self) -> float | None:
        measured = self.data.measured
        return sum(step.batches for step in measured) / len(measured) if measured else None

    def _remove_global_forward_hooks(self) -> None:
        while self.hooks._global_forward_hooks:
            self.hooks._global_forward_hooks.pop().remove()

    def _stop_sampler(self) -> None:
        if self.data.system is None:
            self.data.system = self.sampler.stop()


def _clear_session() -> None:
    global _session
    _session = None


def _after_fork_in_child() -> None:
    """A process forked from the script's (a DataLoader worker, a ``multiprocessing`` child)
    inherits the patched torch: there every hook passes the call through (the forking thread
    keeps its ident in the child, so the thread check alone would not tell)."""
    if _session is not None:
        _session.hooks._owner_thread = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
