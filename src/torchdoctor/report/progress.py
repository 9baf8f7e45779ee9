"""Progress while measuring: a live bar on a terminal, one line per phase otherwise."""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..record.phase_names import PHASE_WORDS


class ProgressDisplay:
    """Callable as ``display(phase, done, total)``; shows torchdoctor's phase on stderr."""

    def __init__(self, enabled: bool = True, console: Console | None = None) -> None:
        self.enabled = enabled
        self.console = console or Console(stderr=True)
        self._progress: Progress | None = None
        self._task = None
        self._phase: str | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.enabled and self.console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold cyan]torchdoctor[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def update(self, phase: str, done: int, total: int, detail: str = "") -> None:
        """``total`` 0: open-ended (``run --whole``), shown as steps so far and ``detail``."""
        if not self.enabled:
            return
        label = PHASE_WORDS.get(phase, phase)
        if self._progress is None:
            if phase != self._phase:
                self._phase = phase
                count = f" ({total} steps)" if total else ""
                print(f"torchdoctor: {label}{count}", file=sys.stderr, flush=True)
            return
        if phase != self._phase or self._task is None:
            if self._task is not None:
                self._progress.remove_task(self._task)
            if not total:  # open-ended: the figures and the time, no bar
                self._progress.columns = (
                    TextColumn("[bold cyan]torchdoctor[/] {task.description}"),
                    TimeElapsedColumn(),
                )
            self._task = self._progress.add_task(label, total=total or None)
            self._phase = phase
        if not total:
            words = " · ".join(w for w in (f"{done} steps", detail) if w)
            # short: the figures must fit an 80-column line with the time
            self._progress.update(self._task, completed=done, description=f"run so far · {words}")
            return
        self._progress.update(self._task, completed=done)
