"""Record host-device syncs and per-step host-to-device copies, down to the user's line.

:class:`SyncWatcher` pushes a ``TorchFunctionMode`` and, while it is active, three small patches:
``torch.Tensor.__new__`` (the legacy ``torch.Tensor([...])`` constructor) and ``torch.from_numpy``,
which no mode sees, and the device synchronize functions (``torch.accelerator``'s, the device
type's own). :meth:`SyncWatcher.stop` undoes all of them.
The events it records are turned into findings by :func:`torchdoctor.analysis.syncs.sync_findings`.

On a CPU run nothing really blocks, so the watcher emulates an accelerator run (the *CPU rule*,
see ``docs/syncs.md``): a tensor is *host-side* when it was made inside the watched window on the
host (from Python data, or by a factory without ``device=``), or derived only from such tensors;
every other tensor (parameters, buffers, the batch once moved, anything computed from them) is
*device-side*. A sync is reported when it reads a device-side tensor; a host-side tensor is
reported as a would-be host-to-device copy when it is moved with ``.to(...)`` or meets a
device-side tensor in an operation. A sync on host tensors is kept pending: it counts if one of
their origins reaches the model's forward unmoved (a script that never moves its batches), or
meets a device-side tensor in an operation (made on the device, as its finding says to, what
derives from it is device-side: nlp-tutorial's attention scores filled into a host tensor, then
read with ``.data.numpy()`` every step).

What the outermost module's forward receives is the model's input (:meth:`SyncWatcher.model_input`,
from forward pre-hooks): a copy of it is the input pipeline's, never a finding. Both are decided
when the window ends (:meth:`SyncWatcher.stop` with ``then``), since a step may build the next
step's batch.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import _push_mode
from torch.utils.weak import WeakIdKeyDictionary

from .._batches import tensors_in
from .._devices import is_accelerator_available, synchronize_functions
from ..analysis.syncs import sync_findings
from ..record import Finding
from ._frames import Site, user_site, value_user
from ._patch import Patcher, passes_through
from ._sync_ops import Origin, SyncMode, batch_origin, fingerprint, remove_function_mode
from ._sync_rules import SyncRules

#: The syncs whose value the script reads: where it goes decides the advice.
VALUE_READS = frozenset({"item", "scalar-conversion", "tolist"})


@dataclass
class SyncEvent:
    """One operation in the step that syncs with the device or copies host data to it."""

    kind: str
    #: The torch operation, e.g. ``Tensor.item`` or ``torch.tensor``.
    op: str
    file: str | None
    line: int | None
    source: str | None
    #: Index of the training step (0 from :meth:`SyncWatcher.start`, +1 per ``mark_step``).
    step: int
    #: Wall time of the blocking call on an accelerator run; ``None`` where not measured.
    duration_ns: int | None = None
    #: For tensors built from Python data: a hash of dtype, shape and values.
    fingerprint: str | None = None
    #: ``file:line`` of the library frame that made the call, when a library made it.
    via: str | None = None
    #: For host tensors: ``file:line`` where the tensor went to (or met) the device.
    used_at: str | None = None
    #: The source line at ``via``.
    via_source: str | None = None
    #: The package ``via`` belongs to (``transformers``, ``pytorch_lightning``, ``torch``).
    library: str | None = None
    #: The library frames from ``via`` out to the user's line, as ``package/file.py:function``.
    library_calls: tuple[str, ...] = ()
    #: The host tensor's origin, for a copy (dropped when that tensor became the model's input).
    origin: Origin | None = field(default=None, repr=False, compare=False)
    #: Whether grad was on when it ran (off: an evaluation's, or acting under no_grad).
    grad: bool = True
    #: For a value read off the device: the call it is handed to at once (``env.step``).
    used_by: str | None = None
    #: CPU rule: a sync on host tensors of these origins, kept only if one reached the model
    #: without a move (the run never moves it, so on an accelerator it would be on the device).
    pending: tuple[Origin, ...] = field(default=(), repr=False, compare=False)


class SyncWatcher(SyncRules):
    """Records syncs and host-to-device copies made by the code that runs while it is active.

    ``start()`` and ``stop()`` may be called from different call stacks (e.g. from two hook
    calls) as long as it is the same thread; ``stop()`` is idempotent and always removes what
    ``start()`` installed, even if the code in between raised or pushed modes of its own.

    Args:
        on_accelerator: whether the run uses an accelerator. ``None`` picks ``True`` when CUDA
            is available. ``False`` applies the CPU rule (module docstring).
        is_batch_tensor: optional callback telling which tensors are batches as the DataLoader
            yielded them; they count as host-side until ``.to(...)``/``.cuda()`` is called on
            them, and moving them is never a finding (it is the run's "to device" part).
    """

    def __init__(
        self,
        on_accelerator: bool | None = None,
        is_batch_tensor: Callable[[torch.Tensor], bool] | None = None,
        patcher: Patcher | None = None,
    ) -> None:
        if on_accelerator is None:
            on_accelerator = is_accelerator_available()
        self.on_accelerator = on_accelerator
        self.is_batch_tensor = is_batch_tensor
        #: Every event recorded, also those the end of the window may drop (see ``events``).
        self.recorded: list[SyncEvent] = []
        self._step = 0
        self._active = False
        self._ignore_depth = 0
        self._thread: int | None = None
        self._mode: SyncMode | None = None
        self._given_patcher = patcher
        self._patcher: Patcher | None = None
        self._host: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._moved: WeakIdKeyDictionary = WeakIdKeyDictionary()
        #: Copies of host tensors made in the window, to their origin: the model's input, later?
        self._moved_from: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._batch = batch_origin()
        self._input_modules: list[torch.nn.Module] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SyncWatcher:
        """Install the mode and patches and begin step 0. A second call does nothing."""
        if self._mode is not None:
            return self
        self._thread = threading.get_ident()
        if any(e.step == self._step for e in self.recorded):
            self._step += 1  # a restart after an unmarked step: that step is over
        self._patcher = self._given_patcher or Patcher.for_process()
        try:
            self._patch_tensor_new()
            self._patch_synchronize()
            self._patch_from_numpy()
            self._mode = SyncMode(self)
            _push_mode(self._mode)
        except BaseException:
            self.stop()
            raise
        self._active = True
        return self

    def stop(self, then: Callable[[list[Finding]], None] | None = None) -> None:
        """Remove the mode and undo every patch. Safe to call twice or without ``start()``.

        ``then(findings)``, if given, is told the findings at once, and again once they are
        decided when a copy made in the window may still reach the model: a script that fetches
        the next step's batch before this step ends (nanoGPT) feeds it to the next forward, so
        the hooks of :meth:`hook_model_inputs` wait for that one call, then remove themselves.
        They are in the watcher's patcher: a later ``stop()``, or its owner's restore, removes
        them too.
        """
        self._active = False
        mode, self._mode = self._mode, None
        if mode is not None:
            if threading.get_ident() != self._thread:
                warnings.warn(
                    "SyncWatcher.stop() called on another thread than start(): its (now "
                    "inactive) mode stays on the starting thread's mode stack",
                    RuntimeWarning,
                    stacklevel=2,
                )
            remove_function_mode(mode)
        if self._patcher is not None:
            self._patcher.restore()
        if then is None:
            return
        then(self.findings())
        if self._input_modules and self._undecided():

            def decided() -> None:
                self._patcher.restore()
                then(self.findings())

            self._hook_forward(self._input_modules, decided)

    def __enter__(self) -> SyncWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def mark_step(self) -> None:
        """End the current step: events from now on get the next step index.

        Call it at each step boundary while watching (the runner: each optimizer step);
        ``steps`` counts the calls, plus a trailing step that recorded events.
        """
        self._step += 1

    @property
    def step(self) -> int:
        """Index of the step being recorded."""
        return self._step

    @property
    def steps(self) -> int:
        """Steps recorded: completed ``mark_step()`` calls, plus a trailing step with events."""
        partial = any(e.step == self._step for e in self.recorded)
        return max(1, self._step + (1 if partial else 0))

    @contextlib.contextmanager
    def ignore(self) -> Iterator[None]:
        """Exclude the block's operations (e.g. the runner's own work) from the record."""
        self._ignore_depth += 1
        try:
            yield
        finally:
            self._ignore_depth -= 1

    def findings(self, steps: int | None = None) -> list[Finding]:
        """The kept events as findings (see :func:`~torchdoctor.analysis.syncs.sync_findings`)."""
        return sync_findings(self.events, steps or self.steps, self.on_accelerator)

    @property
    def events(self) -> list[SyncEvent]:
        """The events that are findings, as far as decided now (final once the window is over).

        Dropped: a copy of a tensor that became the model's input (the script's input pipeline
        built it; in the prefetch pattern a step builds the next step's batch, so this is known
        only at the end), and, under the CPU rule, a sync on host tensors none of which reached
        the model without a move or met a device-side tensor (work on host data before the
        copy, not on the device).
        """
        return [
            e
            for e in self.recorded
            if not (e.origin is not None and e.origin.model_input)
            and (not e.pending or any(o.makes_syncs() for o in e.pending))
        ]

    def model_input(self, args: tuple, kwargs: dict) -> None:
        """Note the tensors the outermost module's forward was called with (the model's input).

        Their origins (a host tensor built in the window, what it was copied or derived from, a
        batch) are the input pipeline: a copy of them is not a finding. A batch or host tensor
        that arrives still on the host means the run does not move its batches (CPU rule), so
        syncs on it and on what was derived from it are found as on an accelerator.
        """
        if threading.get_ident() != self._thread:
            return
        self._ignore_depth += 1  # reading ``_base`` is a torch call our own mode would see
        try:
            for t in tensors_in((args, kwargs), attributes=False, depth=3):
                for candidate in (t, t._base):  # a view (``batch[:, :-1]``) names its base
                    if candidate is not None and self._mark_input(candidate):
                        break
        finally:
            self._ignore_depth -= 1

    def hook_model_inputs(self, modules: Iterable[torch.nn.Module]) -> None:
        """Call :meth:`model_input` before each of ``modules``' forward; undone by ``stop()``."""
        if self._patcher is None:
            raise RuntimeError("SyncWatcher.hook_model_inputs() needs start() first")
        self._input_modules = list(modules)
        self._hook_forward(self._input_modules)

    def _hook_forward(
        self, modules: list[torch.nn.Module], after: Callable[[], None] | None = None
    ) -> None:
        def before_forward(
            module: torch.nn.Module, args: tuple, kwargs: dict | None = None
        ) -> None:
            # A module call snapshots its hooks: one removed during the call (the watcher stopped
            # by a step that ends in another pre-hook of the same call) is still called, and
            # without its kwargs, as torch forgot it wanted them.
            if kwargs is None:
                return
            self.model_input(args, kwargs)
            if after is not None:
                after()

        for module in modules:
            self._patcher.hook(module.register_forward_pre_hook(before_forward, with_kwargs=True))

    def _undecided(self) -> bool:
        """Is an event's fate still open: a copy not yet the model's input, a pending sync?"""
        return any(
            (e.origin is not None and not e.origin.model_input)
            or (e.pending and not any(o.makes_syncs() for o in e.pending))
            for e in self.recorded
        )

    def _mark_input(self, t: torch.Tensor) -> bool:
        origin = self._host_origin(t)
        if origin is not None:
            origin.model_input = origin.reached_model_unmoved = True
            return True
        origin = self._moved_from.get(t)
        if origin is not None:
            origin.model_input = True
            return True
        return False

    # -- patches -----------------------------------------------------------------------------

    def _patch_tensor_new(self) -> None:
        """See ``torch.Tensor([...])``: the legacy constructor reaches no torch function mode."""
        inner = torch.Tensor.__new__
        watcher = self

        @passes_through
        def tensor_new(cls: type, /, *args: Any, **kwargs: Any) -> Any:
            tensor = inner(cls, *args, **kwargs)
            if cls is torch.Tensor and watcher._recording_here():
                watcher._on_legacy_constructor(tensor, args)
            return tensor

        self._patcher.set(torch.Tensor, "__new__", tensor_new)

    def _patch_synchronize(self) -> None:
        """A script's own wait for the device: ``torch.accelerator.synchronize`` and the device
        type's own (CUDA's, XPU's: see _devices)."""
        for owner, attr in synchronize_functions():
            self._patch_one_synchronize(owner, attr)

    def _patch_one_synchronize(self, owner: Any, attr: str) -> None:
        assert self._patcher is not None
        original = getattr(owner, attr)
        label = f"{owner.__name__}.{attr}"
        watcher = self

        @passes_through
        def synchronize(*args: Any, **kwargs: Any) -> Any:
            if not watcher._recording_here():
                return original(*args, **kwargs)
            site = user_site()
            start_ns = time.perf_counter_ns()
            try:
                return original(*args, **kwargs)
            finally:
                if site is not None:
                    watcher._emit(
                        "cuda-synchronize",
                        label,
                        site,
                        duration_ns=watcher._measured(start_ns),
                    )

        self._patcher.set(owner, attr, synchronize)

    def _patch_from_numpy(self) -> None:
        """See ``torch.from_numpy``: like the legacy constructor, no torch function mode does."""
        original = torch.from_numpy
        watcher = self

        @passes_through
        def from_numpy(*args: Any, **kwargs: Any) -> torch.Tensor:
            tensor = original(*args, **kwargs)
            if watcher._recording_here():
                array = args[0] if args else next(iter(kwargs.values()), None)
                watcher._on_host_data(tensor, array, "torch.from_numpy")
            return tensor

        self._patcher.set(torch, "from_numpy", from_numpy)

    # -- recording ---------------------------------------------------------------------------

    def _recording_here(self) -> bool:
        return self._active and not self._ignore_depth and threading.get_ident() == self._thread

    def _measured(self, start_ns: int) -> int | None:
        """Elapsed time since ``start_ns``, kept only where the wait is real (accelerator runs)."""
        return time.perf_counter_ns() - start_ns if self.on_accelerator else None

    def _emit(
        self,
        kind: str,
        op: str,
        site: Site,
        *,
        step: int | None = None,
        duration_ns: int | None = None,
        fingerprint: str | None = None,
        used_at: str | None = None,
        origin: Origin | None = None,
        pending: tuple[Origin, ...] = (),
    ) -> None:
        self.recorded.append(
            SyncEvent(
                kind=kind,
                op=op,
                file=site.file,
                line=site.line,
                source=site.source,
                step=self._step if step is None else step,
                duration_ns=duration_ns,
                fingerprint=fingerprint,
                via=site.via,
                used_at=used_at,
                via_source=site.via_source,
                library=site.library,
                library_calls=site.library_calls,
                origin=origin,
                pending=pending,
                grad=torch.is_grad_enabled(),
                used_by=value_user(site) if kind in VALUE_READS else None,
            )
        )

    def _on_legacy_constructor(self, tensor: torch.Tensor, args: tuple[Any, ...]) -> None:
        """Track ``torch.Tensor(...)`` made in the step: from a list it is Python data."""
        data = args[0] if len(args) == 1 else None
        if isinstance(data, torch.Tensor):
            return
        from_data = data is not None and not isinstance(data, (int, torch.Size))
        self._on_host_data(tensor, data if from_data else None, "torch.Tensor")

    def _on_host_data(self, tensor: torch.Tensor, data: Any, op: str) -> None:
        """Track a host tensor made in the step outside any mode's view; ``data`` if from data."""
        self._ignore_depth += 1  # the fingerprint's own tensor calls are not the user's
        try:
            site = user_site()
            if site is None:
                return
            origin = Origin(
                "tensor-from-python-data" if data is not None else "host-tensor-to-device",
                op,
                site,
                self._step,
                fingerprint(tensor, data) if data is not None else None,
            )
            self._host[tensor] = origin
        finally:
            self._ignore_depth -= 1
