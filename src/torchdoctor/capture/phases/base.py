"""The shape every capture phase has, and how the session drives it.

A phase is one stretch of the script's own training loop (or, for the phases that own their
loaders, work done between two of its steps). The session keeps a table of phases and runs them in
order: it asks each whether it is ``wanted``, calls ``start``, hands it every finished step
(``on_step``) until it says it is done, calls ``finish``, and moves on. ``close`` runs on every
ending (also when the script stops half way) and must release what ``start`` took.

A phase sees the session through :class:`PhaseSession` (what it may read and call) and writes its
results into ``session.data`` (:class:`~torchdoctor.capture._data.CaptureData`): the fields its
``writes`` names. Besides, a phase may lend the hooks an instrument for its stretch (the session's
``sync_watcher``, ``profiler``) and say which dataset it serves (``main_dataset``): the only
members of the session it sets (:data:`LENT`). A phase that needs what an earlier one measured
names it in ``reads``; the table's order must put the writer first
(``tests/unit/capture/test_session_surface.py`` checks all of this on the phases' code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from ...record import phase_names

if TYPE_CHECKING:
    import torch

    from ...options import RunOptions
    from ...record import StepSeries
    from .._data import CaptureData, StepMarks
    from .._device import DeviceClock
    from .._inputs import BuiltInputs
    from .._loaders import LoaderTracker, ReplayStore, ServedPasses
    from .._optimizers import OptimizerTracker
    from .._parallel import ParallelWatch
    from .._patch import Patcher
    from .._ranks import Ranks
    from .._sampler import SystemSampler
    from .._script_state import ScriptState
    from .._timeline import StepTimeline

#: The members of the session a phase may set: instruments it lends the hooks for its stretch,
#: and the dataset whose batches it serves.
LENT = ("sync_watcher", "profiler", "main_dataset")


@runtime_checkable
class PhaseSession(Protocol):
    """What a phase sees of the capture session: all it may read, call, or set (:data:`LENT`)."""

    options: RunOptions
    #: Where results go (each phase writes the fields its ``writes`` names).
    data: CaptureData
    timeline: StepTimeline
    clock: DeviceClock
    clock_ns: Callable[[], int]
    loaders: LoaderTracker
    replay: ReplayStore
    passes: ServedPasses
    inputs: BuiltInputs
    optimizers: OptimizerTracker
    patcher: Patcher
    ranks: Ranks
    parallel: ParallelWatch
    sampler: SystemSampler
    state: ScriptState
    original_next: Callable[[Any], Any]
    main_dataset: int | None
    sync_watcher: Any
    profiler: Any

    def progress(self, phase: str, done: int, total: int) -> None: ...
    def push(self, part: str) -> None: ...
    def pop(self, part: str) -> None: ...
    def time_part(self, part: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...
    def close_labels(self) -> None: ...
    def is_batch_tensor(self, tensor: torch.Tensor) -> bool: ...
    def root_modules(self) -> list[torch.nn.Module]: ...
    def step_ms(self, step: StepMarks, device_events: bool = True) -> float: ...
    def step_parts(self, step: StepMarks, device_events: bool = True) -> dict[str, float]: ...
    def wants_loader_doctor(self) -> bool: ...
    def shutdown_workers(self) -> None: ...
    def watch_only(self) -> None: ...
    def restart_cost_sample(self) -> None: ...
    def hook_root_modules_only(self) -> None: ...
    def measured_series(self) -> StepSeries: ...
    def model_alone_step_ms(self) -> list[float]: ...
    def measured_batches_per_step(self) -> float | None: ...


#: Returned by :meth:`Phase.next_batch` when the phase does not serve the batch itself.
NOT_SERVED: Any = object()


class Phase:
    """One phase of the capture. Subclasses set ``name`` and override what they need."""

    #: Shown in progress lines and used in the record's notes.
    name: ClassVar[str] = ""
    #: The measured steps: batches drawn now tell which DataLoader feeds training.
    measuring: ClassVar[bool] = False
    #: The script's state is probed in this phase's steps too (what it already does, where it
    #: calls its model: ``ScriptState``), not only in measured ones: once, in the warmup, so
    #: no measured step carries the probe (it took 0.4 ms of the demo's first measured step).
    probes: ClassVar[bool] = False
    #: Runs torchdoctor's own DataLoader clones: the script's loaders are not tracked meanwhile
    #: and ``--fix`` overrides are not applied to them.
    owns_loaders: ClassVar[bool] = False
    #: Does all its work in ``start`` (between two steps of the script), taking no steps.
    takes_steps: ClassVar[bool] = True
    #: In a distributed job, runs only when every rank wants it (phases that take steps must:
    #: every rank has to take the same steps); a phase taking no steps may run on some ranks.
    agreed: ClassVar[bool] = True
    #: The fields of ``session.data`` this phase writes, and those it reads that an earlier
    #: phase wrote (any phase may add to ``notes``).
    writes: ClassVar[tuple[str, ...]] = ()
    reads: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.steps_done = 0

    def wanted(self, session: PhaseSession) -> bool:
        """Whether to run at all; a phase that is skipped for a reason worth telling notes it."""
        return True

    def total(self, session: PhaseSession) -> int:
        """Steps this phase takes, for progress."""
        return 0

    def start(self, session: PhaseSession) -> None:
        """Begin: called between two steps of the script."""

    def next_batch(self, session: PhaseSession, dataset_key: int) -> Any:
        """A batch to hand the script instead of its loader's next one, or :data:`NOT_SERVED`."""
        return NOT_SERVED

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        """One finished training step; True when the phase is done."""
        self.steps_done += 1
        total = self.total(session)
        session.progress(self.name, self.steps_done, total)
        return self.steps_done >= total

    def finish(self, session: PhaseSession) -> None:
        """Done: keep the results (``close`` follows)."""

    def close(self, session: PhaseSession) -> None:
        """Release what ``start`` took; idempotent, runs on every ending."""


class Done(Phase):
    """After the last phase: the script is stopped (or, with ``stop=False``, left unobserved)."""

    name = phase_names.DONE
