"""The shape every capture phase has, and how the session drives it.

A phase is one stretch of the script's own training loop (or, for the phases that own their
loaders, work done between two of its steps). The session keeps a table of phases and runs them in
order: it asks each whether it is ``wanted``, calls ``start``, hands it every finished step
(``on_step``) until it says it is done, calls ``finish``, and moves on. ``close`` runs on every
ending (also when the script stops half way) and must release what ``start`` took.

A phase reads the session (options, the step timeline, the device, the tracked loaders) and writes
its results into ``session.data`` (:class:`~torchdoctor.capture._data.CaptureData`) only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ...record import phase_names

if TYPE_CHECKING:
    from .._data import StepMarks
    from .._session import CaptureSession

#: Returned by :meth:`Phase.next_batch` when the phase does not serve the batch itself.
NOT_SERVED: Any = object()


class Phase:
    """One phase of the capture. Subclasses set ``name`` and override what they need."""

    #: Shown in progress lines and used in the record's notes.
    name: ClassVar[str] = ""
    #: The measured steps: batches drawn now tell which DataLoader feeds training.
    measuring: ClassVar[bool] = False
    #: Runs torchdoctor's own DataLoader clones: the script's loaders are not tracked meanwhile
    #: and ``--fix`` overrides are not applied to them.
    owns_loaders: ClassVar[bool] = False
    #: Does all its work in ``start`` (between two steps of the script), taking no steps.
    takes_steps: ClassVar[bool] = True
    #: In a distributed job, runs only when every rank wants it (phases that take steps must:
    #: every rank has to take the same steps); a phase taking no steps may run on some ranks.
    agreed: ClassVar[bool] = True

    def __init__(self) -> None:
        self.steps_done = 0

    def wanted(self, session: CaptureSession) -> bool:
        """Whether to run at all; a phase that is skipped for a reason worth telling notes it."""
        return True

    def total(self, session: CaptureSession) -> int:
        """Steps this phase takes, for progress."""
        return 0

    def start(self, session: CaptureSession) -> None:
        """Begin: called between two steps of the script."""

    def next_batch(self, session: CaptureSession, dataset_key: int) -> Any:
        """A batch to hand the script instead of its loader's next one, or :data:`NOT_SERVED`."""
        return NOT_SERVED

    def on_step(self, session: CaptureSession, step: StepMarks) -> bool:
        """One finished training step; True when the phase is done."""
        self.steps_done += 1
        session.progress(self.name, self.steps_done, self.total(session))
        return self.steps_done >= self.total(session)

    def finish(self, session: CaptureSession) -> None:
        """Done: keep the results (``close`` follows)."""

    def close(self, session: CaptureSession) -> None:
        """Release what ``start`` took; idempotent, runs on every ending."""


class Done(Phase):
    """After the last phase: the script is stopped (or, with ``stop=False``, left unobserved)."""

    name = phase_names.DONE
