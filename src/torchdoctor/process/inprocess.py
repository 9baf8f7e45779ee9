"""Run a user's script (or a block of code) in this process under capture, and stop it when
measured: the child of a supervised run, ``torchdoctor.watch`` and the demo."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from .._errors import lost_peer
from ..capture import (
    CaptureSession,
    Listener,
    ProgressFn,
    StopRun,
    raised_by_torchdoctor,
)
from ..options import RunOptions
from ..record import RunRecord, phase_names
from ..report.timeline import rank_timeline_path
from .build import build_record
from .ending import CTRL_C, FINISHED, RAISED, STOPPED, exit_for, exited
from .patched import patched_imports, run_patched_script
from .target import Target, resolve_target

PACKAGE_DIR = Path(__file__).resolve().parents[1]


@dataclass
class RunOutcome:
    """A finished run: the record, how the script ended, and the exit status to use."""

    record: RunRecord
    exit_status: int
    error: BaseException | None = None


def run_target(
    target: Target,
    options: RunOptions,
    progress: ProgressFn | None = None,
    listener: Listener | None = None,
) -> RunOutcome:
    """Run ``target`` in this process under capture, stop it when measured, and restore torch.

    ``listener`` hears each phase start and step end (a supervised run streams them out).

    Raises:
        TorchdoctorError: the script or module does not exist.
    """
    code_path = resolve_target(target)
    session = CaptureSession(options, progress=progress, listener=listener)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    error: BaseException | None = None
    ended = FINISHED
    try:
        sys.argv = [str(code_path), *target.argv]
        sys.path.insert(0, str(code_path.parent) if target.script else os.getcwd())
        if options.loss_values:
            seed_everything()
        session.install()
        try:
            with patched_imports(options.source_overrides):
                # a module (-m) is found through the import hook: its package stays its own
                patched_main = (
                    options.source_overrides.get(str(code_path)) if target.script else None
                )
                if patched_main is not None:
                    run_patched_script(code_path, patched_main)
                elif target.script:
                    runpy.run_path(str(code_path), run_name="__main__")
                else:
                    runpy.run_module(target.module or "", run_name="__main__", alter_sys=True)
        except StopRun:
            ended = STOPPED
        except SystemExit as exc:
            ended = exited(exc.code)  # sys.exit("message") exits with 1, as Python does
        except KeyboardInterrupt:
            ended = CTRL_C
        except BaseException as exc:  # noqa: BLE001 - the user's error is reported, not ours
            ended = RAISED
            error = exc
            mine = raised_by_torchdoctor(exc) and not lost_peer(str(exc))  # a rank left: not ours
            if mine and session.data.internal_error is None:
                # Our hook failed inside the script's call: our bug, never the script's.
                session.data.internal_error = exc  # type: ignore[assignment]
    finally:
        session.uninstall()
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
    record = build_record(session, target.describe(), ended, error)
    if options.timeline_path:
        write_run_timeline(session, options.timeline_path, record)
    status = exit_for(record)  # the ending decided it, from how the script ended
    if session.ranks.launched:
        record = _job_record(session, record, ended)
    return RunOutcome(record, status, error or session.data.internal_error)


def write_run_timeline(session: CaptureSession, path: str, record: RunRecord) -> None:
    """The kept steps' parts as a Chrome/Perfetto trace (on a job, each rank its own file)."""
    from ..capture import write_timeline

    rank = session.ranks.rank if session.ranks.launched else None
    if rank is not None:
        path = rank_timeline_path(path, rank)
    phases = [
        (phase_names.MEASURE, session.data.measured),
        (phase_names.MODEL_ALONE, session.data.model_alone),
        (phase_names.NO_SYNC, session.data.no_sync),
    ]
    spans = []
    if record.whole_run is not None and session.whole is not None:  # run --whole's events
        t0 = session.whole.t0_ns
        spans = [
            (e.kind, t0 + int(e.start_s * 1e9), t0 + int((e.start_s + e.seconds) * 1e9))
            for e in record.whole_run.events
        ]
    try:
        write_timeline(path, phases, spans, process=" ".join(record.command), rank=rank)
    except OSError as exc:
        record.notes.append(f"the timeline could not be written to {path}: {exc}")


def _job_record(session: CaptureSession, record: RunRecord, ended: str) -> RunRecord:
    """On rank 0 of a coordinated job: every rank's record gathered into the job's.

    The ranks stopped at the same step, so each reaches this gather; a rank that failed ended
    its process instead, and the launcher ends the others (the supervisor then puts the job
    together from what each rank streamed).
    """
    from ..analysis.distributed import combine

    ranks = session.ranks
    try:
        if ended != STOPPED or ranks.peer_lost or not ranks.coordinated:
            return record  # a rank ended early: the parent puts the job together
        gathered = ranks.gather(record.to_dict())
    except (RuntimeError, ValueError) as exc:  # a rank went away meanwhile
        record.notes.append(f"the ranks' records could not be gathered ({exc})")
        return record
    finally:
        ranks.close()
    if gathered is None:
        return record
    records = [RunRecord.from_dict(d) for d in gathered if d is not None]
    return combine(records, world_size=ranks.world_size, nnodes=ranks.env.nnodes)


def user_traceback(exc: BaseException) -> list[str]:
    """The script's traceback without torchdoctor's and runpy's frames above it."""
    tb = exc.__traceback__
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    shown = traceback.TracebackException(type(exc), exc, tb)
    # Our wrappers between the user's call and torch's (the backward hook): not theirs to read.
    shown.stack = traceback.StackSummary.from_list(
        [f for f in shown.stack if not _is_ours(f.filename)]
    )
    return list(shown.format())


def _is_ours(filename: str) -> bool:
    return filename.startswith(str(PACKAGE_DIR)) or filename.endswith(
        ("runpy.py", "<frozen runpy>")
    )


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
            ended = FINISHED
        elif issubclass(exc_type, StopRun):
            ended = STOPPED
        elif issubclass(exc_type, KeyboardInterrupt):
            ended = CTRL_C
        else:
            ended = RAISED
        self.record = build_record(self._session, ["<watch>"], ended, exc)
        return ended == STOPPED


def seed_everything(seed: int = 0) -> None:
    """Seed torch, ``random`` and numpy (when installed): two runs of one script then draw the
    same batches and initial weights (``torchdoctor fix``'s numerics check)."""
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)
