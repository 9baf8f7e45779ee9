"""Run a user's script (or a block of code) under capture and turn what was seen into a record."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.util
import os
import runpy
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from . import __version__
from ._endings import exit_status_of, status_of
from ._errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    TorchdoctorError,
)
from ._paths import resolve_script
from .analysis.verdict import summarise
from .capture import (
    CaptureSession,
    Listener,
    ProgressFn,
    StopRun,
    detect_environment,
    raised_by_torchdoctor,
)
from .loader import fix_trial
from .options import RunOptions
from .record import FixTrial, RunRecord, TraceReport

PACKAGE_DIR = Path(__file__).resolve().parent


@dataclass
class Target:
    """A script path or a module name, with the arguments it receives as ``sys.argv[1:]``."""

    script: str | None = None
    module: str | None = None
    argv: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        head = [self.script] if self.script else ["-m", self.module or ""]
        return [*head, *self.argv]


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
    code_path = _resolve(target)
    session = CaptureSession(options, progress=progress, listener=listener)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    error: BaseException | None = None
    ended = "finished"
    try:
        sys.argv = [str(code_path), *target.argv]
        sys.path.insert(0, str(code_path.parent) if target.script else os.getcwd())
        session.install()
        try:
            if target.script:
                runpy.run_path(str(code_path), run_name="__main__")
            else:
                runpy.run_module(target.module or "", run_name="__main__", alter_sys=True)
        except StopRun:
            ended = "stopped"
        except SystemExit as exc:
            code = exc.code
            # sys.exit("message") prints the message and exits with status 1, as Python does
            ended = (
                f"exited with status {0 if code is None else code if isinstance(code, int) else 1}"
            )
        except KeyboardInterrupt:
            ended = "interrupted"
        except BaseException as exc:  # noqa: BLE001 - the user's error is reported, not ours
            ended = "error"
            error = exc
            if raised_by_torchdoctor(exc) and session.data.internal_error is None:
                # Our hook failed inside the script's call: our bug, never the script's.
                session.data.internal_error = exc  # type: ignore[assignment]
    finally:
        session.uninstall()
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
    record = build_record(session, target.describe(), ended, error)
    if options.timeline_path:
        _write_timeline(session, options.timeline_path, record)
    status = exit_status_of(record, ended)
    if session.ranks.launched:
        record = _job_record(session, record, ended)
    return RunOutcome(record, status, error or session.data.internal_error)


def _write_timeline(session: CaptureSession, path: str, record: RunRecord) -> None:
    """The kept steps' parts as a Chrome/Perfetto trace (on a job, each rank its own file)."""
    from .capture import write_timeline

    if session.ranks.launched:
        stem, dot, ext = path.rpartition(".")
        path = (
            f"{stem}.rank{session.ranks.rank}.{ext}" if dot else f"{path}.rank{session.ranks.rank}"
        )
    phases = [
        ("measure", session.data.measured),
        ("model-alone", session.data.model_alone),
        ("no-sync", session.data.no_sync),
    ]
    try:
        write_timeline(path, phases)
    except OSError as exc:
        record.notes.append(f"the timeline could not be written to {path}: {exc}")


def _job_record(session: CaptureSession, record: RunRecord, ended: str) -> RunRecord:
    """On rank 0 of a coordinated job: every rank's record gathered into the job's.

    The ranks stopped at the same step, so each reaches this gather; a rank that failed ended
    its process instead, and the launcher ends the others (the supervisor then puts the job
    together from what each rank streamed).
    """
    from .analysis.distributed import combine

    ranks = session.ranks
    try:
        if ended != "stopped" or not ranks.coordinated:
            return record
        gathered = ranks.gather(record.to_dict())
    except (RuntimeError, ValueError) as exc:  # a rank went away meanwhile
        record.notes.append(f"the ranks' records could not be gathered ({exc})")
        return record
    finally:
        ranks.close()
    if gathered is None:
        return record
    records = [RunRecord.from_dict(d) for d in gathered if d is not None]
    # torchrun's GROUP_WORLD_SIZE: the nodes (agents) of the job.
    nnodes = int(os.environ.get("GROUP_WORLD_SIZE", "1") or 1)
    return combine(records, world_size=ranks.world_size, nnodes=nnodes)


def build_record(
    session: CaptureSession,
    command: list[str],
    ended: str,
    error: BaseException | None = None,
    snapshot: bool = False,
) -> RunRecord:
    """The run record from a finished capture session.

    With ``snapshot``, the record so far of a session still running: no trace analysis, and the
    status stays ``partial`` until the supervisor learns how the run ended.
    """
    opts = session.options
    record = RunRecord(
        tool_version=__version__,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=command,
        env=detect_environment(session),
        loader=session.loaders.main_settings(),
        warmup_steps=opts.warmup,
        requested_steps=opts.steps,
        steps=session.measured_series(),
        model_alone=session.model_alone_step_ms(),
        loader_alone=session.data.loader_alone,
        system=session.data.system,
        seen=dict(session.data.seen),
        notes=list(session.data.notes),
    )
    record.loader_overrides = dict(opts.loader_overrides)
    record.step_boundary = session.boundary.kind or "optimizer"
    record.step_boundary_evidence = session.boundary.evidence
    if record.step_boundary == "backward":
        record.backwards_per_step = session.boundary.backwards_per_step
    record.built_inputs = session.inputs.described()
    record.threads_override = opts.threads_override
    record.no_sync = [round(session.step_ms(step), 4) for step in session.data.no_sync]
    _attach_trials(record, session)
    record.seen.update(session.data.ddp_settings)
    record.findings.extend(session.data.parallel_findings)
    record.findings.extend(session.data.loop_findings)
    record.findings.extend(session.data.sync_findings)
    record.overhead_ms.update(session.overheads_ms())
    record.sync_sampled_steps = len(session.data.sync_sample_ms)
    if session.data.loader_diagnosis is not None:
        record.loader_report = session.data.loader_diagnosis.report
        record.findings.extend(session.data.loader_diagnosis.findings)
    if snapshot:
        record.status = "partial"
        summarise(record)
        return record
    if session.data.trace_paths:
        _attach_trace(record, session.data.trace_paths)
    record.status, more_notes = status_of(session, record, ended, error)
    record.notes.extend(more_notes)
    summarise(record)
    return record


def _attach_trials(record: RunRecord, session: CaptureSession) -> None:
    """``--try``'s trials and the step's FLOPs, against the measured steps."""
    from .analysis.trials import flops_of, trials_of

    summarise(record)  # the baseline's figures
    if session.data.trials:
        record.trials = trials_of(record, session.data.trials)
    device = record.env.device_name if record.env is not None else ""
    record.flops = flops_of(record, session.data.flops, device)
    record.flops_per_step = record.flops.per_step if record.flops is not None else None


def _attach_trace(record: RunRecord, paths: list[str]) -> None:
    from .analysis.trace_analysis import attach_trace

    record.trace = TraceReport(recorded_files=[str(p) for p in paths])
    try:
        attach_trace(record, paths)
    except TorchdoctorError as exc:
        record.notes.append(f"the trace could not be analysed: {exc.message}")


def _resolve(target: Target) -> Path:
    if target.script:
        return resolve_script(target.script)
    spec = _find_module(target.module or "")
    if spec is None or spec.origin is None:
        raise TorchdoctorError(
            f"module not found: {target.module}",
            "run from the directory that contains it, or install its package",
        )
    return Path(spec.origin).resolve()


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


def _find_module(name: str) -> Any:
    """The spec ``python -m name`` runs: searched from the current folder first, and a package's
    ``__main__`` (namespace packages too)."""
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{name}.__main__")
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path.remove(os.getcwd())
    return spec


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
            ended = "finished"
        elif issubclass(exc_type, StopRun):
            ended = "stopped"
        elif issubclass(exc_type, KeyboardInterrupt):
            ended = "interrupted"
        else:
            ended = "error"
        self.record = build_record(self._session, ["<watch>"], ended, exc)
        return ended == "stopped"


def run_cli(target: Target, options: RunOptions) -> int:
    """``torchdoctor run`` (and ``loader``): run supervised, save the record, report, verify the fix.

    The script runs in a child process (:mod:`._supervisor`), so the record survives whatever
    ends it; the record is written before anything is printed, so a closed pipe or a narrow
    terminal encoding can cost the text, never the record.
    """
    from ._supervisor import run_supervised
    from .report.progress import ProgressDisplay
    from .report.terminal import render

    # Under `torchrun -m torchdoctor run`, every rank runs this; rank 0 reports the job.
    other_rank = not options.nproc_per_node and os.environ.get("RANK", "0") != "0"
    try:
        with ProgressDisplay(enabled=not options.quiet and not other_rank) as display:
            outcome = run_supervised(target, options, progress=display.update)
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM) before the supervision began
        if options.json_path:
            record = RunRecord(command=target.describe(), status="interrupted")
            record.notes.append("interrupted before the script started")
            record.save(options.json_path)
        raise
    record = outcome.record
    status = outcome.exit_status
    if other_rank or not outcome.reports:
        return status  # rank 0 prints the job's report and writes its record
    if options.fix and status == EXIT_OK:
        verify_fix(target, options, record, quiet=options.quiet)
        after = record.fix.after if record.fix is not None else None
        if after is not None and after.status == "interrupted":
            status = EXIT_INTERRUPTED  # Ctrl-C or SIGTERM during the re-run ends the command
    if options.json_path:
        record.save(options.json_path)
    if options.html_path:
        from .report.html import write_html

        write_html(record, options.html_path)
    with _printing():
        render(record)  # with the fix trial's panel, when there is one
        if options.json_path:
            print(f"run record written to {options.json_path}")
        if options.html_path:
            print(f"HTML report written to {options.html_path}")
        if options.timeline_path and Path(options.timeline_path).exists():
            print(f"timeline written to {options.timeline_path} (open it in ui.perfetto.dev)")
    return status


class _printing:
    """Printing the report never loses the run: a closed pipe (``| head``) ends the text quietly,
    and characters the terminal's encoding lacks are replaced rather than raised."""

    def __enter__(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="replace")

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, SystemExit):
            return True  # rich's own answer to a closed pipe: it has already muted stdout
        if exc_type is not None and issubclass(exc_type, BrokenPipeError):
            # Point stdout at nothing, so the interpreter's own flush at exit cannot fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return True
        return False


def verify_fix(
    target: Target, options: RunOptions, record: RunRecord, quiet: bool = False
) -> FixTrial:
    """Re-run the script with the advised DataLoader settings injected; the trial is ``record.fix``.

    See :func:`torchdoctor.loader.fix_trial`: this gives it the re-run (the same script, with
    the overrides and the thread count injected, no loader doctor, no sync sampling, no trace).
    """
    from ._supervisor import run_supervised
    from .report.progress import ProgressDisplay

    def rerun(overrides: dict[str, Any], steps: int, warmup: int, threads: int | None) -> RunRecord:
        rerun_options = dataclasses.replace(
            options,
            steps=steps,
            warmup=warmup,
            counterfactuals=False,
            loader_overrides=overrides,
            threads_override=threads,
            loader_doctor="off",
            sync_steps=0,
            trace_dir=None,
            json_path=None,
            fix=False,
        )
        with ProgressDisplay(enabled=not quiet) as display:
            return run_supervised(target, rerun_options, progress=display.update).record

    record.fix = fix_trial(record, rerun, steps=options.steps, warmup=options.warmup)
    return record.fix
