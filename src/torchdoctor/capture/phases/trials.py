"""Measured trials (``run --try``): each lever in the script's own loop, against its measured steps.

Runs after every counterfactual, since trials change what the step computes. Each lever (and
each of its settings) gets a child Patcher: applied between two steps, its own warm-up steps, its
measured steps, undone before the next. The results are ``session.data.trials`` (raw steps);
``analysis.trials`` turns them into speedups with their spread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..._devices import peak_memory_mb, reset_peak_memory, total_memory_mb
from ...analysis.trials import samples_per_s
from ...record import phase_names
from ...record.lever_names import BATCH_SIZE
from .._checkpoint_lever import Checkpoint
from .._compile_lever import Compile
from .._levers import (
    PLATEAU_GAIN,
    Amp,
    Baseline,
    BatchSize,
    ChannelsLast,
    Foreach,
    Lever,
    Threads,
)
from .base import NOT_SERVED, Phase, PhaseSession

if TYPE_CHECKING:
    from .._data import StepMarks

#: How each lever of :data:`~torchdoctor.record.lever_names.LEVERS` is pulled, by its name: the
#: names are the table's (tests/unit/test_lever_table.py ties the two together).
LEVERS: dict[str, type[Lever]] = {
    cls.name: cls for cls in (Amp, ChannelsLast, Compile, Foreach, Threads, BatchSize, Checkpoint)
}
#: Measured steps per setting of a lever that tries several.
STEPS_PER_SETTING = 8
#: A larger batch is not tried when it would need more than this share of the device's memory.
MEMORY_HEADROOM = 0.9


@dataclass
class TrialRun:
    """One setting of one lever, as measured (plain values; the record is made later)."""

    lever: Lever
    setting: str
    #: Measured steps it takes (after the lever's warm-up).
    steps: int = 0
    warmup_ms: list[float] = field(default_factory=list)
    steps_ms: list[float] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    #: Each measured step's parts (ms by step part): what the lever did not change must not
    #: have moved (``analysis.lever_bounds``).
    parts_ms: list[dict[str, float]] = field(default_factory=list)
    #: Its steps as cut, read into ``warmup_ms`` and ``steps_ms`` once the setting has run (on
    #: an accelerator, after the device has finished them: one wait per setting, none per step).
    marks: list[Any] = field(default_factory=list)
    memory_mb: float | None = None
    skipped: str | None = None
    #: ``changed``, ``code``, ``caveats`` and a failed lever's ``error``, read while it was live.
    texts: dict[str, Any] = field(default_factory=dict)


class TrialsPhase(Phase):
    name = phase_names.TRIALS
    writes = ("trials",)
    reads = ("measured",)
    #: The batch-size lever iterates clones of the script's loader: they are not the script's.
    owns_loaders = True

    def __init__(self) -> None:
        super().__init__()
        self._queue: list[TrialRun] = []
        self._run: TrialRun | None = None
        self._patcher: Any = None
        self._memory: Any = None

    def wanted(self, session: PhaseSession) -> bool:
        names = session.options.trials
        if not names:
            return False
        if session.ranks.launched:
            session.data.notes.append("trials skipped: --try runs on one process, not in a job")
            return False
        return bool(session.data.measured)

    def total(self, session: PhaseSession) -> int:
        return len(self._queue) + len(session.data.trials)

    def start(self, session: PhaseSession) -> None:
        # The script as it runs, before each lever and after the last: each lever is compared
        # with the steps taken next to it (drift and bursts of load hit both alike).
        baseline = Baseline()
        steps = session.options.steps
        short = min(steps, STEPS_PER_SETTING)  # a setting of several, or a baseline
        for name in session.options.trials:
            lever = LEVERS[name]()
            reason = _skip_reason(session, lever)
            if reason is not None:
                session.data.trials.append(
                    TrialRun(lever, "", skipped=reason, texts=_texts(session, lever, ""))
                )
                continue
            try:
                settings = lever.settings(session)
            except Exception as exc:  # noqa: BLE001 - see _skip_reason
                reason = f"could not list its settings: {type(exc).__name__}: {exc}"[:300]
                session.data.trials.append(TrialRun(lever, "", skipped=reason, texts={}))
                continue
            self._queue.append(TrialRun(baseline, "", short))
            self._queue.extend(
                TrialRun(lever, s, short if len(settings) > 1 else steps) for s in settings
            )
        if self._queue:
            self._queue.append(TrialRun(baseline, "", short))
        self._next(session)

    def next_batch(self, session: PhaseSession, dataset_key: int):
        run = self._run
        if run is None or run.lever.name != BATCH_SIZE or dataset_key != session.main_dataset:
            return NOT_SERVED
        session.push("data_wait")
        try:
            return run.lever.next_batch(session.original_next)  # type: ignore[attr-defined]
        finally:
            session.pop("data_wait")

    def on_step(self, session: PhaseSession, step: StepMarks) -> bool:
        run = self._run
        if run is None:
            return True
        run.marks.append(step)
        try:
            run.lever.step_ended(session, len(run.marks))
        except Exception as exc:  # noqa: BLE001 - the lever's failure is its trial's
            run.lever.error = f"{type(exc).__name__}: {exc}"[:300]  # type: ignore[attr-defined]
        if len(run.marks) < run.lever.warmup + run.steps:
            return False
        session.clock.synchronize()
        parts = [session.step_parts(s) for s in run.marks]
        times = [sum(p.values()) for p in parts]
        run.warmup_ms, run.steps_ms = times[: run.lever.warmup], times[run.lever.warmup :]
        run.parts_ms = parts[run.lever.warmup :]
        run.batches = [s.batches for s in run.marks[run.lever.warmup :]]
        run.marks = []
        self._finish_run(session)
        session.progress(self.name, len(session.data.trials), self.total(session))
        return self._next(session)

    def close(self, session: PhaseSession) -> None:
        """On every ending: the lever being measured and those not tried yet (the script ended
        before them) are kept as skipped, each with why: none leaves the table silently."""
        cut = self._run
        self._release()
        tried = {r.lever.name for r in session.data.trials}
        for run in ([cut] if cut is not None else []) + self._queue:
            if run.lever.name == "baseline" or run.lever.name in tried:
                continue
            tried.add(run.lever.name)
            why = "while it was measured" if run is cut else "before it was tried"
            session.data.trials.append(
                TrialRun(run.lever, "", skipped=f"the script ended {why}", texts={})
            )
        self._queue = []

    def _release(self) -> None:
        """Undo the lever being measured."""
        patcher, self._patcher = self._patcher, None
        if patcher is not None:
            patcher.restore()
        self._run = None

    # --- the queue ----------------------------------------------------------------------------

    def _next(self, session: PhaseSession) -> bool:
        """Start the next run; True when none is left."""
        while self._queue:
            run = self._queue.pop(0)
            if run.lever.name == BATCH_SIZE and self._plateaued(session, run):
                continue
            self._patcher = session.patcher.child()
            self._memory = _MemoryPeak(session)
            try:
                run.lever.apply(session, self._patcher, run.setting)
            except Exception as exc:  # noqa: BLE001 - a lever that cannot apply is a failed trial
                self._patcher.restore()
                run.skipped = f"could not apply it: {type(exc).__name__}: {exc}"
                run.texts = _texts(session, run.lever, run.setting)
                session.data.trials.append(run)
                continue
            self._run = run
            if run.lever.name == BATCH_SIZE:
                session.main_dataset = session.loaders.main_dataset_key()
            return False
        return True

    def _finish_run(self, session: PhaseSession) -> None:
        run = self._run
        assert run is not None
        run.memory_mb = self._memory.peak_mb() if self._memory is not None else None
        run.texts = _texts(session, run.lever, run.setting)
        session.data.trials.append(run)
        self._release()

    def _plateaued(self, session: PhaseSession, run: TrialRun) -> bool:
        """Batch sizes stop growing once samples/s stop growing, or before the next size would
        not fit the accelerator's memory (grown in proportion to the batch)."""
        done = [r for r in session.data.trials if r.lever is run.lever and r.steps_ms]
        if done and done[-1].memory_mb is not None:
            total = _device_memory_mb(session)
            grown = done[-1].memory_mb * int(run.setting) / int(done[-1].setting)
            if total is not None and grown > MEMORY_HEADROOM * total:
                run.skipped = f"would need about {grown:.0f} MB of the device's {total:.0f} MB"
                session.data.trials.append(run)
                return True
        if len(done) < 2:
            return False
        a, b = done[-2], done[-1]
        return samples_per_s(b) < PLATEAU_GAIN * samples_per_s(a)


def _texts(session: PhaseSession, lever: Lever, setting: str) -> dict[str, Any]:
    """What the report says of a lever's run, read while it is live; a lever whose texts fail
    is a failed trial, never torchdoctor's end."""
    try:
        breaks = getattr(lever, "graph_breaks", None)  # may find that nothing compiled
        texts: dict[str, Any] = {
            "changed": lever.changed(setting),
            "code": lever.code(session, setting),
            "caveats": lever.caveats(session),
            "detail": lever.detail(session),
        }
    except Exception as exc:  # noqa: BLE001 - one lever's failure is its trial's, not the run's
        return {"changed": lever.name, "error": f"{type(exc).__name__}: {exc}"[:300]}
    error = getattr(lever, "error", None)
    if error:
        texts["error"] = error
    if breaks:
        texts["graph_breaks"] = breaks
    return texts


def _skip_reason(session: PhaseSession, lever: Lever) -> str | None:
    try:
        return lever.skip_reason(session)
    except Exception as exc:  # noqa: BLE001 - a lever that cannot tell is skipped, with why
        return f"could not check whether it applies: {type(exc).__name__}: {exc}"[:300]


def _device_memory_mb(session: PhaseSession) -> float | None:
    device = session.clock.device
    if device is None or device.type == "cpu":
        return None  # on CPU the process's RSS is reported, not bounded
    return total_memory_mb(device)


class _MemoryPeak:
    """Peak memory while a setting runs: the device's allocator, or this process's RSS."""

    def __init__(self, session: PhaseSession) -> None:
        device = session.clock.device
        on_device = device is not None and device.type != "cpu"
        self._device = device if on_device and reset_peak_memory(device) else None

    def peak_mb(self) -> float:
        import psutil

        if self._device is not None:
            peak = peak_memory_mb(self._device)
            if peak is not None:
                return peak
        return round(psutil.Process().memory_info().rss / 2**20, 1)
