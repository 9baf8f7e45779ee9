"""``torchdoctor.watch()``: the capture of ``torchdoctor run`` around a block of the caller's code."""

from __future__ import annotations

from types import TracebackType

from .capture import CaptureSession, ProgressFn, StopRun
from .options import RunOptions
from .record import RunRecord
from .runner import build_record


class watch:  # noqa: N801 - used like a function: ``with torchdoctor.watch(steps=20) as run:``
    """Measure the training loop inside a ``with`` block; the record is in ``run.record``.

    The block is stopped (by an exception the ``with`` swallows) after warmup, measured,
    model-alone and loader-alone steps, exactly as ``torchdoctor run`` stops a script.

    Args:
        steps: measured steps (one step is one ``optimizer.step()``).
        warmup: steps run before measuring.
        counterfactuals: also run the model-alone and loader-alone phases.
        progress: called as ``progress(phase, done, total)``.

    Example:
        >>> with torchdoctor.watch(steps=20) as run:  # doctest: +SKIP
        ...     train(model, loader)
        >>> run.record.verdict.kind  # doctest: +SKIP
    """

    def __init__(
        self,
        steps: int = 20,
        warmup: int = 5,
        counterfactuals: bool = True,
        progress: ProgressFn | None = None,
    ) -> None:
        self._session = CaptureSession(
            RunOptions(steps=steps, warmup=warmup, counterfactuals=counterfactuals),
            progress=progress,
        )
        self.record: RunRecord | None = None

    def __enter__(self) -> watch:
        self._session.install()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._session.uninstall()
        if exc_type is None:
            ended = "finished"
        elif issubclass(exc_type, StopRun):
            ended = "stopped"
        elif issubclass(exc_type, KeyboardInterrupt):
            ended = "interrupted"
        else:
            ended = "error"
        self.record = build_record(self._session, ["<watch>"], ended, exc)
        return ended == "stopped"
