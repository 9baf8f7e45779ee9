"""The live capture: hooks PyTorch inside the user's process to time each training step.

What is hooked, and why each is safe to undo:

- ``DataLoader.__iter__`` and ``_BaseDataLoaderIter.__next__`` (patched): which loaders exist,
  how long the loop blocks for a batch (``data_wait``), and the batches themselves, which the
  model-alone phase replays;
- ``torch.Tensor.to`` / ``.cuda`` (patched): copies of a batch's tensors are ``to_device``;
- global module forward pre/post hooks (registered): the outermost module call is ``forward``;
- ``torch.autograd.backward`` (patched; ``Tensor.backward`` calls it): ``backward``;
- global optimizer step pre/post hooks (registered): ``optimizer``, and the step boundary.

A step is one ``step()`` of the first optimizer seen. Phases run in order: warmup, measure,
model-alone (the loader's iterator replays batches already in memory), loader-alone (a clone of
the loader without the model), then :class:`StopRun` is raised into the script.
"""

from __future__ import annotations

import gc
import inspect
import statistics
import sys
import time
import weakref
from collections.abc import Callable
from enum import Enum
from typing import Any

import torch
import torch.nn.modules.module as _module_mod
import torch.optim.optimizer as _optim_mod
import torch.utils.data.dataloader as _dl_mod
from torch.utils.data import DataLoader

from ..analysis.loader_memory import loader_memory
from ..analysis.verdict import INPUT_BOUND, summarise
from ..analysis.worker_sweep import SweepPolicy, WorkerSweep, sweep_candidates
from ..options import RunOptions
from ..record import Finding, LoaderAlone, LoaderSettings, RunRecord, StepSeries
from ._frames import user_site
from ._inloop_sweep import InLoopSweep
from ._loaders import loader_settings
from ._patch import Patcher
from ._sampler import SystemSampler
from ._timeline import StepTimeline, parts_from_marks
from .loader_doctor import LoaderDiagnosis, available_cpus, diagnose_loader, loader_findings
from .loader_sweep import measure_loader_point, shutdown_workers
from .profiler import StepProfiler
from .syncs import SyncWatcher, alias_op

#: Batches kept in memory for the model-alone replay, at most this many bytes (and ``steps``).
REPLAY_MAX_BYTES = 512 * 2**20
#: Steps of the ``--trace`` profile: one warm-up step (the profiler's start-up lands there),
#: then the recorded ones.
TRACE_WARMUP_STEPS = 1
TRACE_ACTIVE_STEPS = 3
#: Counted steps per setting of the whole-step worker sweep (after its warm steps).
SWEEP_MAX_STEPS_PER_SETTING = 8


class StopRun(BaseException):
    """Raised into the user's script to stop it once the measurement is done.

    A ``BaseException``, so a ``try/except Exception`` in the user's loop does not swallow it.
    """


class Phase(str, Enum):
    WARMUP = "warmup"
    SYNC_SAMPLE = "sync-sample"
    TRACE = "trace"
    MEASURE = "measure"
    MODEL_ALONE = "model-alone"
    SWEEP = "worker-sweep"
    LOADER_ALONE = "loader-alone"
    DONE = "done"


ProgressFn = Callable[[str, int, int], None]

_session: CaptureSession | None = None


def active_session() -> CaptureSession | None:
    """The installed session, if any (one per process)."""
    return _session


class CaptureSession:
    """Installs the hooks, follows the phases, and keeps what was measured."""

    def __init__(
        self,
        options: RunOptions,
        progress: ProgressFn | None = None,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.options = options
        self._progress = progress or (lambda phase, done, total: None)
        self._clock_ns = clock_ns
        self._patcher = Patcher()
        self.phase = Phase.WARMUP
        self.timeline = StepTimeline(clock_ns)
        self.device: torch.device | None = None
        self.uses_device_events = False

        self._module_depth = 0
        self._global_forward_hooks: list[Any] = []
        self._root_modules: weakref.WeakSet = weakref.WeakSet()
        self._primary_optimizer: weakref.ref | None = None
        self._optimizers: weakref.WeakSet = weakref.WeakSet()
        self._optimizer_depth = 0
        self._steps_done = 0  # steps counted in the current phase
        self._step_batches = 0
        self._measured_marks: list[list[Any]] = []
        self._measured_batches: list[int] = []
        self._model_alone_marks: list[list[Any]] = []

        self._loaders: dict[int, weakref.ref] = {}  # id(dataset) -> newest loader over it
        self._loader_settings: dict[int, LoaderSettings] = {}
        self._created_at: dict[int, str] = {}  # id(DataLoader) -> "file:line"
        self._iterators: weakref.WeakSet = weakref.WeakSet()
        self._batches_by_dataset: dict[int, int] = {}
        self._main_dataset: int | None = None
        self._batch_ids: set[int] = set()
        #: Batches kept for the model-alone replay, per dataset (see _keep_for_replay).
        self._replay_by_dataset: dict[int, list[Any]] = {}
        self._replay: list[Any] = []
        self._replay_bytes = 0
        self._replay_pos = 0

        self._sweep: InLoopSweep | None = None
        self.worker_sweep: WorkerSweep | None = None
        self.loader_diagnosis: LoaderDiagnosis | None = None
        self._sync_watcher: SyncWatcher | None = None
        self._profiler: StepProfiler | None = None
        self._labels: list[Any] = []
        self.trace_paths: list[str] = []
        self.sync_findings: list[Finding] = []
        self.sync_sample_ms: list[float] = []
        self.sampler = SystemSampler()
        self.system = None
        self.loader_alone: LoaderAlone | None = None
        self.notes: list[str] = []
        self.seen: dict[str, int] = {
            "dataloaders": 0,
            "dataloader_iterators": 0,
            "batches": 0,
            "optimizers": 0,
            "optimizer_steps": 0,
            "forward_calls": 0,
            "backward_calls": 0,
        }
        self.internal_error: Exception | None = None
        self.started_ns = clock_ns()

    # --- install / uninstall ----------------------------------------------------------------

    def install(self) -> None:
        """Install every hook; on failure, undo what was installed and re-raise."""
        global _session
        if _session is not None:
            raise RuntimeError("a torchdoctor capture is already active in this process")
        _session = self
        self._patcher.on_restore(_clear_session)
        try:
            self._install()
        except BaseException:
            self.uninstall()
            raise

    def _install(self) -> None:
        session = self
        p = self._patcher

        orig_iter = DataLoader.__iter__
        orig_init = DataLoader.__init__
        orig_next = _dl_mod._BaseDataLoaderIter.__next__
        orig_to = torch.Tensor.to
        orig_cuda = torch.Tensor.cuda
        orig_backward = torch.autograd.backward

        init_signature = inspect.signature(orig_init)

        def dataloader_init(loader, *args, **kwargs):
            if session.phase not in (Phase.LOADER_ALONE, Phase.SWEEP):
                if session.options.loader_overrides:
                    # Name every argument so an override cannot collide with a positional one.
                    bound = init_signature.bind(loader, *args, **kwargs).arguments
                    bound.pop("self")
                    extra = bound.pop("kwargs", {})
                    args, kwargs = (), {**bound, **extra}
                    kwargs.update(session._overrides_for(loader, args, kwargs))
                site = user_site(sys._getframe(1))
                if site is not None:
                    session._created_at[id(loader)] = f"{site.file}:{site.line}"
            return orig_init(loader, *args, **kwargs)

        def dataloader_iter(loader):
            it = orig_iter(loader)
            session._on_iter(loader, it)
            return it

        def iterator_next(it):
            return session._next_batch(it, orig_next)

        def tensor_to(tensor, *args, **kwargs):
            if session._batch_ids and id(tensor) in session._batch_ids:
                return session._timed("to_device", orig_to, tensor, *args, **kwargs)
            return orig_to(tensor, *args, **kwargs)

        def tensor_cuda(tensor, *args, **kwargs):
            if session._batch_ids and id(tensor) in session._batch_ids:
                return session._timed("to_device", orig_cuda, tensor, *args, **kwargs)
            return orig_cuda(tensor, *args, **kwargs)

        def autograd_backward(*args, **kwargs):
            session.seen["backward_calls"] += 1
            return session._timed("backward", orig_backward, *args, **kwargs)

        p.set(DataLoader, "__init__", dataloader_init)
        p.set(DataLoader, "__iter__", dataloader_iter)
        p.set(_dl_mod._BaseDataLoaderIter, "__next__", iterator_next)
        p.set(torch.Tensor, "to", tensor_to)
        p.set(torch.Tensor, "cuda", tensor_cuda)
        p.on_restore(alias_op(tensor_to, orig_to))
        p.on_restore(alias_op(tensor_cuda, orig_cuda))
        p.set(torch.autograd, "backward", autograd_backward)
        # Global module hooks put every module call on torch's slow path (measured: 22% on an
        # 81-module MLP, benchmarks/capture_overhead.py). They find the outermost modules during
        # warmup; from the first measured step only those few carry hooks.
        self._global_forward_hooks = [
            _module_mod.register_module_forward_pre_hook(self._forward_pre),
            _module_mod.register_module_forward_hook(self._forward_post, always_call=True),
        ]
        p.on_restore(self._remove_global_forward_hooks)
        p.hook(_optim_mod.register_optimizer_step_pre_hook(self._optimizer_pre))
        p.hook(_optim_mod.register_optimizer_step_post_hook(self._optimizer_post))
        p.on_restore(self._stop_sampler)
        p.on_restore(self._stop_sync_watcher)
        p.on_restore(self._stop_profiler)

    def uninstall(self) -> list[BaseException]:
        """Undo every patch and hook, and shut down DataLoader workers this run started."""
        errors = self._patcher.restore()
        if self._sweep is not None:
            self._sweep.close()
            self._sweep = None
        self.shutdown_workers()
        return errors

    @property
    def installed(self) -> bool:
        return self._patcher.active

    def shutdown_workers(self) -> None:
        """Stop the worker processes of every DataLoader iterator the script created."""
        for it in list(self._iterators):
            shutdown_workers(it)
        for ref in list(self._loaders.values()):
            loader = ref()
            if loader is not None and getattr(loader, "_iterator", None) is not None:
                shutdown_workers(loader._iterator)
        self._replay.clear()
        self._replay_by_dataset.clear()
        self._batch_ids.clear()
        gc.collect()

    # --- hooks ------------------------------------------------------------------------------

    def _push(self, part: str) -> None:
        self.timeline.push(part)
        if self._profiler is not None:
            label = self._profiler.label(part)
            label.__enter__()
            self._labels.append(label)

    def _pop(self, part: str) -> None:
        self.timeline.pop(part)
        if self._labels:
            self._labels.pop().__exit__(None, None, None)

    def _timed(self, part: str, fn: Callable, *args, **kwargs):
        self._check_done()
        self._push(part)
        try:
            if part == "to_device" and self._sync_watcher is not None:
                # The batch copy is the "to device" part, not a finding; the watcher still
                # notes the batch as moved.
                with self._sync_watcher.ignore():
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)
        finally:
            self._pop(part)

    def _forward_pre(self, module, args) -> None:
        if self._module_depth == 0:
            self._check_done()
            if self._global_forward_hooks and module not in self._root_modules:
                self._root_modules.add(module)
            self.seen["forward_calls"] += 1
            self._push("forward")
        self._module_depth += 1

    def _forward_post(self, module, args, output) -> None:
        self._module_depth = max(self._module_depth - 1, 0)
        if self._module_depth == 0:
            self._pop("forward")

    def _optimizer_pre(self, optimizer, args, kwargs) -> None:
        self._check_done()
        if optimizer not in self._optimizers:
            self._optimizers.add(optimizer)
            self.seen["optimizers"] += 1
        self._optimizer_depth += 1
        self._push("optimizer")

    def _optimizer_post(self, optimizer, args, kwargs) -> None:
        self._optimizer_depth = max(self._optimizer_depth - 1, 0)
        self._pop("optimizer")
        self.seen["optimizer_steps"] += 1
        if self._primary_optimizer is None:
            self._primary_optimizer = weakref.ref(optimizer)
            self._detect_device(optimizer)
        if self._primary_optimizer() is optimizer and self._optimizer_depth == 0:
            try:
                self._on_step_end()
            except StopRun:
                raise
            except Exception as exc:  # noqa: BLE001 - our bug must not look like the user's
                self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        """torchdoctor itself failed: stop measuring and stop the script cleanly."""
        self.internal_error = exc
        self.phase = Phase.DONE
        raise StopRun() from exc

    def _next_batch(self, it, orig_next):
        self._check_done()
        if self.phase is Phase.LOADER_ALONE:
            return orig_next(it)  # torchdoctor's own loader-alone clone
        dataset_key = id(getattr(it, "_dataset", it))
        if self._sweep is not None and dataset_key == self._main_dataset:
            self._push("data_wait")
            try:
                batch = self._sweep.next_batch(orig_next)
            finally:
                self._pop("data_wait")
            self._step_batches += 1
            self._batch_ids = _tensor_ids(batch)
            return batch
        if self.phase is Phase.MODEL_ALONE and dataset_key == self._main_dataset and self._replay:
            batch = self._replay[self._replay_pos % len(self._replay)]
            self._replay_pos += 1
            self._step_batches += 1
            self._batch_ids = _tensor_ids(batch)
            return batch
        self._push("data_wait")
        try:
            batch = orig_next(it)
        finally:
            self._pop("data_wait")
        self.seen["batches"] += 1
        self._step_batches += 1
        self._batch_ids = _tensor_ids(batch)
        if self.phase is Phase.MEASURE:
            self._batches_by_dataset[dataset_key] = self._batches_by_dataset.get(dataset_key, 0) + 1
        if self.phase is not Phase.MEASURE or dataset_key not in self._replay_by_dataset:
            self._keep_for_replay(dataset_key, batch)
        return batch

    def _on_iter(self, loader: DataLoader, it: Any) -> None:
        self._check_done()
        if self.phase in (Phase.LOADER_ALONE, Phase.SWEEP):
            return  # torchdoctor's own clones
        key = id(loader.dataset)
        if key not in self._loaders or self._loaders[key]() is not loader:
            self.seen["dataloaders"] += 1
        self._loaders[key] = weakref.ref(loader)
        settings = loader_settings(loader)
        settings.created_at = self._created_at.get(id(loader))
        self._loader_settings[key] = settings
        if it not in self._iterators:
            self._iterators.add(it)
            self.seen["dataloader_iterators"] += 1

    def _overrides_for(self, loader, args, kwargs) -> dict[str, Any]:
        overrides = dict(self.options.loader_overrides)
        if not overrides:
            return overrides
        if overrides.get("num_workers", kwargs.get("num_workers", 0)) == 0:
            # These options are invalid without workers.
            overrides.pop("persistent_workers", None)
            overrides.pop("prefetch_factor", None)
        return overrides

    # --- phases -----------------------------------------------------------------------------

    def _check_done(self) -> None:
        if self.phase is Phase.DONE and self.options.stop:
            raise StopRun()

    def _on_step_end(self) -> None:
        marks = self.timeline.cut()
        batches, self._step_batches = self._step_batches, 0
        if self.phase is Phase.WARMUP:
            self._steps_done += 1
            self._progress(Phase.WARMUP.value, self._steps_done, self.options.warmup)
            if self._steps_done >= self.options.warmup:
                self._after_warmup_phase(Phase.WARMUP)
        elif self.phase is Phase.SYNC_SAMPLE:
            self.sync_sample_ms.append(sum(parts_from_marks(marks).values()))
            self._steps_done += 1
            self._progress(Phase.SYNC_SAMPLE.value, self._steps_done, self.options.sync_steps)
            if self._steps_done >= self.options.sync_steps:
                self._stop_sync_watcher()
                self._after_warmup_phase(Phase.SYNC_SAMPLE)
            elif self._sync_watcher is not None:
                self._sync_watcher.mark_step()
        elif self.phase is Phase.TRACE and self._profiler is not None:
            self._profiler.step()
            self._steps_done += 1
            total = TRACE_WARMUP_STEPS + TRACE_ACTIVE_STEPS
            self._progress(Phase.TRACE.value, self._steps_done, total)
            if self._steps_done >= total:
                self._stop_profiler()
                self._after_warmup_phase(Phase.TRACE)
        elif self.phase is Phase.MEASURE:
            self._measured_marks.append(marks)
            self._measured_batches.append(batches)
            self._steps_done += 1
            self._progress(Phase.MEASURE.value, self._steps_done, self.options.steps)
            if self._steps_done >= self.options.steps:
                self._after_measure()
        elif self.phase is Phase.MODEL_ALONE:
            self._model_alone_marks.append(marks)
            self._steps_done += 1
            self._progress(Phase.MODEL_ALONE.value, self._steps_done, self.options.steps)
            if self._steps_done >= self.options.steps:
                self._after_model_alone()
        elif self.phase is Phase.SWEEP and self._sweep is not None:
            step_ms = sum(parts_from_marks(marks, self.uses_device_events).values())
            if self._sweep.on_step_end(step_ms, batches):
                self.worker_sweep = self._sweep.result()
                self._sweep.close()
                self._sweep = None
                self._finish()

    def _enter(self, phase: Phase) -> None:
        self.phase = phase
        self._steps_done = 0
        if phase is Phase.MEASURE and self.options.warmup > 0:
            self._hook_root_modules_only()
        if phase is Phase.MEASURE:
            self.sampler.start()
            self._progress(phase.value, 0, self.options.steps)
        self.timeline.reset()

    def _after_warmup_phase(self, finished: Phase) -> None:
        """Untimed phases run in order after warmup (sync finder, then trace), then measure."""
        order = [Phase.WARMUP, Phase.SYNC_SAMPLE, Phase.TRACE]
        for phase in order[order.index(finished) + 1 :]:
            if phase is Phase.SYNC_SAMPLE and self.options.sync_steps > 0:
                self._start_sync_sample()
                return
            if phase is Phase.TRACE and self.options.trace_dir:
                self._start_trace()
                return
        self._enter(Phase.MEASURE)

    def _start_trace(self) -> None:
        """Record a torch.profiler trace of a few steps, with torchdoctor's parts labelled."""
        self.phase = Phase.TRACE
        self._steps_done = 0
        self._progress(Phase.TRACE.value, 0, TRACE_WARMUP_STEPS + TRACE_ACTIVE_STEPS)
        profiler = StepProfiler(
            self.options.trace_dir, wait=0, warmup=TRACE_WARMUP_STEPS, active=TRACE_ACTIVE_STEPS
        )
        profiler.start()
        self._profiler = profiler
        self.timeline.reset()

    def _stop_profiler(self) -> None:
        profiler, self._profiler = self._profiler, None
        while self._labels:
            self._labels.pop().__exit__(None, None, None)
        if profiler is None:
            return
        profiler.stop()
        self.trace_paths = [str(p) for p in profiler.trace_paths]

    def _start_sync_sample(self) -> None:
        """Watch the next steps for host syncs and per-step host-to-device copies."""
        self.phase = Phase.SYNC_SAMPLE
        self._steps_done = 0
        self._progress(Phase.SYNC_SAMPLE.value, 0, self.options.sync_steps)
        watcher = SyncWatcher(
            on_accelerator=self._on_accelerator(),
            is_batch_tensor=lambda t: id(t) in self._batch_ids,
        )
        watcher.start()
        self._sync_watcher = watcher
        self.timeline.reset()

    def _stop_sync_watcher(self) -> None:
        watcher, self._sync_watcher = self._sync_watcher, None
        if watcher is None:
            return
        watcher.stop()
        self.sync_findings = watcher.findings()

    def _after_measure(self) -> None:
        self.system = self.sampler.stop()
        if not self.options.counterfactuals:
            self._finish()
            return
        main = self.main_dataset_key()
        self._replay = self._replay_by_dataset.get(main, []) if main is not None else []
        if main is None or not self._replay:
            if main is None:
                self.notes.append(
                    "model-alone phase skipped: the loop does not draw batches from a DataLoader "
                    "(time outside forward/backward/optimizer is input or host work)"
                )
            else:
                self.notes.append("model-alone phase skipped: batches too large to keep in memory")
            self._finish()
            return
        self._main_dataset = main
        self._enter(Phase.MODEL_ALONE)

    def _after_model_alone(self) -> None:
        """Start the whole-step worker sweep when it is wanted and the model is on the CPU."""
        if self._wants_loader_doctor() and not self._on_accelerator():
            loader = self.main_loader()
            if loader is not None:
                self.shutdown_workers()  # the script's own workers would compete with the clones
                cpus = available_cpus()
                policy = SweepPolicy(sweep_candidates(cpus, loader.num_workers))
                self._sweep = InLoopSweep(
                    loader,
                    policy,
                    steps_per_setting=min(self.options.steps, SWEEP_MAX_STEPS_PER_SETTING),
                    clock_ns=self._clock_ns,
                    on_point=lambda workers, rate: self._progress(
                        Phase.SWEEP.value, len(policy.points), len(policy.candidates)
                    ),
                )
                self.phase = Phase.SWEEP
                self._progress(Phase.SWEEP.value, 0, len(policy.candidates))
                self._sweep.start()
                self.timeline.reset()
                return
        self._finish()

    def _wants_loader_doctor(self) -> bool:
        mode = self.options.loader_doctor
        if mode == "always":
            return self.main_loader() is not None
        if mode != "auto" or self.main_loader() is None:
            return False
        return self.provisional_verdict() == INPUT_BOUND

    def provisional_verdict(self) -> str:
        """The verdict the steps measured so far point to."""
        record = RunRecord(
            steps=self.measured_series(),
            model_alone=self.model_alone_step_ms(),
            loader=self.main_loader_settings(),
            seen=dict(self.seen),
        )
        summarise(record)
        return record.verdict.kind if record.verdict else ""

    def _on_accelerator(self) -> bool:
        return self.device is not None and self.device.type != "cpu"

    def _finish(self) -> None:
        """Loader-alone phase and the loader doctor, then stop the script."""
        self.phase = Phase.LOADER_ALONE
        self.shutdown_workers()  # the script's own workers are idle now; free the cores
        if self.options.counterfactuals:
            self._run_loader_alone()
        if self.worker_sweep is not None or (
            self.options.counterfactuals and self._wants_loader_doctor()
        ):
            self._run_loader_doctor()
        self.phase = Phase.DONE
        if self.options.stop:
            raise StopRun()

    def _run_loader_alone(self) -> None:
        key = self.main_dataset_key()
        loader = self._loaders[key]() if key is not None else None
        if loader is None:
            return
        self._progress(Phase.LOADER_ALONE.value, 0, self.options.steps)
        try:
            self.loader_alone = measure_loader_alone(loader, self.options.steps)
            self._progress(Phase.LOADER_ALONE.value, self.options.steps, self.options.steps)
        except Exception as exc:  # noqa: BLE001 - a failing clone must not lose the report
            self.notes.append(f"loader-alone phase failed: {type(exc).__name__}: {exc}")

    def _run_loader_doctor(self) -> None:
        loader = self.main_loader()
        if loader is None:
            return
        needed = None
        model_alone = self.model_alone_step_ms()
        batches_per_step = self.measured_batches_per_step() or 1.0
        if model_alone:
            needed = batches_per_step * 1000.0 / statistics.mean(model_alone)
        self._progress("loader-doctor", 0, 1)
        try:
            diagnosis = diagnose_loader(
                loader,
                accelerator=self._on_accelerator(),
                target_batches_per_s=needed,
                sweep=self.worker_sweep is None,
            )
            if self.worker_sweep is not None:
                diagnosis.sweep = self.worker_sweep
                if diagnosis.memory is not None:  # at the worker count the sweep chose
                    diagnosis.memory = loader_memory(
                        diagnosis.memory.leaves,
                        self.worker_sweep.best_workers,
                        loader.prefetch_factor,
                    )
                diagnosis.findings = loader_findings(diagnosis, accelerator=self._on_accelerator())
            self.loader_diagnosis = diagnosis
        except Exception as exc:  # noqa: BLE001 - the doctor's failure must not lose the run
            self.notes.append(f"loader doctor failed: {type(exc).__name__}: {exc}")
        self._progress("loader-doctor", 1, 1)

    # --- results ----------------------------------------------------------------------------

    def main_dataset_key(self) -> int | None:
        """The dataset that supplied most batches during the measured steps."""
        if not self._batches_by_dataset:
            return None
        return max(self._batches_by_dataset, key=self._batches_by_dataset.__getitem__)

    def main_loader_settings(self) -> LoaderSettings | None:
        key = self.main_dataset_key()
        if key is None and self._loader_settings:
            key = next(iter(self._loader_settings))
        return self._loader_settings.get(key) if key is not None else None

    def main_loader(self) -> DataLoader | None:
        key = self.main_dataset_key()
        ref = self._loaders.get(key) if key is not None else None
        return ref() if ref is not None else None

    def measured_series(self) -> StepSeries:
        self.synchronize_device()
        series = StepSeries()
        for marks, batches in zip(self._measured_marks, self._measured_batches):
            parts = parts_from_marks(marks, self.uses_device_events)
            series.step_ms.append(round(sum(parts.values()), 4))
            for name, ms in parts.items():
                series.part(name).append(round(ms, 4))
            series.batches.append(batches)
        return series

    def model_alone_step_ms(self) -> list[float]:
        return [
            round(sum(parts_from_marks(m, self.uses_device_events).values()), 4)
            for m in self._model_alone_marks
        ]

    def measured_batches_per_step(self) -> float | None:
        if not self._measured_batches:
            return None
        return sum(self._measured_batches) / len(self._measured_batches)

    # --- internals --------------------------------------------------------------------------

    def _detect_device(self, optimizer) -> None:
        for group in optimizer.param_groups:
            for param in group["params"]:
                self.device = param.device
                break
            break
        if self.device is not None and self.device.type != "cpu":
            self._use_device_events(self.device)

    def _use_device_events(self, device: torch.device) -> None:
        """Time steps with events on the device's current stream, read after measuring."""
        event_cls = getattr(torch, "Event", None)  # torch>=2.4 device-agnostic events
        if event_cls is None:
            return

        def make_event():
            event = event_cls(device=device, enable_timing=True)
            event.record()
            return event

        self.timeline.set_event_factory(make_event)
        self.uses_device_events = True

    def synchronize_device(self) -> None:
        """Wait for the device once, after measuring, so recorded events can be read."""
        if self.uses_device_events and self.device is not None:
            if hasattr(torch, "accelerator"):
                torch.accelerator.synchronize(self.device)
            elif self.device.type == "cuda":
                torch.cuda.synchronize(self.device)

    def _keep_for_replay(self, dataset_key: int, batch: Any) -> None:
        """Keep a batch for the model-alone phase.

        Batches are kept from the untimed steps before measuring (warmup, sync finder, trace):
        a kept batch's memory cannot be reused for the next one, and paying for fresh memory
        inside a measured step would slow it. Only a dataset first seen while measuring has its
        batches kept then (one is enough to replay).
        """
        kept = self._replay_by_dataset.setdefault(dataset_key, [])
        if len(kept) >= self.options.steps or (self.phase is Phase.MEASURE and kept):
            return
        size = _batch_bytes(batch)
        if self._replay_bytes + size > REPLAY_MAX_BYTES and kept:
            return
        kept.append(batch)
        self._replay_bytes += size

    def _hook_root_modules_only(self) -> None:
        """Swap the global module hooks for hooks on the outermost modules seen in warmup."""
        if not self._global_forward_hooks or not self._root_modules:
            return
        for module in list(self._root_modules):
            self._patcher.hook(module.register_forward_pre_hook(self._forward_pre))
            self._patcher.hook(module.register_forward_hook(self._forward_post, always_call=True))
        self._remove_global_forward_hooks()

    def _remove_global_forward_hooks(self) -> None:
        while self._global_forward_hooks:
            self._global_forward_hooks.pop().remove()

    def _stop_sampler(self) -> None:
        if self.system is None:
            self.system = self.sampler.stop()


def _clear_session() -> None:
    global _session
    _session = None


def measure_loader_alone(loader: DataLoader, batches: int) -> LoaderAlone:
    """Iterate a clone of ``loader`` (same workers) without the model, over whole rounds.

    Worker start-up is timed apart (``first_batch_ms``), and the batches prefetched when the
    workers start are not counted: they arrive at once (see ``measure_loader_point``).
    """
    point = measure_loader_point(loader, loader.num_workers, batches)
    rate = point.batches_per_s
    return LoaderAlone(
        batches=point.batches,
        seconds=round(point.batches / rate, 4) if rate > 0 else 0.0,
        batches_per_s=round(rate, 3),
        needed_batches_per_s=None,
        first_batch_ms=round(point.first_batch_ms, 3) if point.first_batch_ms else None,
    )


def _batch_tensors(batch: Any, limit: int | None = None) -> list[torch.Tensor]:
    """The tensors in a batch (tensors, sequences, mappings, attribute holders), at most
    ``limit`` of them."""
    found: list[torch.Tensor] = []
    stack = [batch]
    while stack and (limit is None or len(found) < limit):
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj if limit is None else obj[:limit])
        elif isinstance(obj, dict):
            values = list(obj.values())
            stack.extend(values if limit is None else values[:limit])
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.extend(v for v in vars(obj).values() if isinstance(v, torch.Tensor))
    return found


def _tensor_ids(batch: Any, limit: int = 64) -> set[int]:
    """Ids of (at most ``limit`` of) the tensors in a batch; cheap enough for every step."""
    return {id(t) for t in _batch_tensors(batch, limit)}


def _batch_bytes(batch: Any) -> int:
    return sum(t.element_size() * t.nelement() for t in _batch_tensors(batch))
