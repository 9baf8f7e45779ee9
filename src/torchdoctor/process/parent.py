"""``torchdoctor run`` in the parent: run supervised, save the record, report, verify the fix.
Torch-free until the report (the script runs in a child process)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from .._errors import EXIT_INTERRUPTED, EXIT_OK
from .._paths import where
from ..options import RunOptions
from ..record import INTERRUPTED, FixTrial, RankEnv, RunRecord
from .ending import decide_not_started, settle
from .target import Target


def run_cli(target: Target, options: RunOptions) -> int:
    """``torchdoctor run`` (and ``loader``): run supervised, save the record, report, verify the fix.

    The script runs in a child process (:mod:`.supervisor`), so the record survives whatever
    ends it; the record is written before anything is printed, so a closed pipe or a narrow
    terminal encoding can cost the text, never the record.
    """
    from ..report.progress import ProgressDisplay
    from ..report.terminal import render
    from .supervisor import run_supervised

    # Under `torchrun -m torchdoctor run`, every rank runs this; rank 0 reports the job.
    other_rank = not options.nproc_per_node and RankEnv.detect().rank != 0
    try:
        with ProgressDisplay(enabled=not options.quiet and not other_rank) as display:
            outcome = run_supervised(target, options, progress=display.update)
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM) before the supervision began
        if options.json_path:
            record = RunRecord(command=target.describe())
            settle(record, decide_not_started(None), derive=False)
            record.save(options.json_path)
        raise
    record = outcome.record
    status = outcome.exit_status
    if other_rank or not outcome.reports:
        return status  # rank 0 prints the job's report and writes its record
    if options.fix and status == EXIT_OK:
        verify_fix(target, options, record, quiet=options.quiet)
        after = record.fix.after if record.fix is not None else None
        if after is not None and after.status == INTERRUPTED:
            status = EXIT_INTERRUPTED  # Ctrl-C or SIGTERM during the re-run ends the command
    if options.json_path:
        record.save(options.json_path)
    if options.html_path:
        from ..report.html import write_html

        write_html(record, options.html_path)
    with printing():
        render(record)  # with the fix trial's panel, when there is one
        if options.json_path:
            print(f"run record written to {where(options.json_path)}")
        if options.html_path:
            print(f"HTML report written to {options.html_path}")
        if options.timeline_path:
            _say_timelines(options.timeline_path, record)
    return status


def _say_timelines(path: str, record: RunRecord) -> None:
    """Every timeline file the run wrote (a job: one per rank), for Perfetto."""
    from ..report.timeline import timeline_paths

    job = record.distributed
    written = [
        p
        for p in timeline_paths(path, [r.rank for r in job.ranks] if job is not None else None)
        if Path(p).exists()
    ]
    for p in written:
        print(f"timeline written to {p} (open it in ui.perfetto.dev)")
    if len(written) > 1:
        print("  (one file per rank; each names its rank as its process)")


class printing:
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
    """Re-run the script as it is and with the advised DataLoader settings injected, alternately;
    the trial is ``record.fix``.

    See :func:`torchdoctor.loader.fix_trial`: this gives it the re-run (the same script, with
    the overrides and the thread count injected, no loader doctor, no sync sampling, no trace).
    """
    from ..report.progress import ProgressDisplay
    from .supervisor import run_supervised

    def rerun(overrides: dict[str, Any], steps: int, warmup: int, threads: int | None) -> RunRecord:
        rerun_options = options.measuring_only(
            steps=steps, warmup=warmup, loader_overrides=overrides, threads_override=threads
        )
        with ProgressDisplay(enabled=not quiet) as display:
            return run_supervised(target, rerun_options, progress=display.update).record

    from ..loader import fix_trial

    # Extra rounds, while the judgement is unclear, within one more --max-seconds.
    record.fix = fix_trial(
        record, rerun, steps=options.steps, warmup=options.warmup, budget_s=options.max_seconds
    )
    return record.fix
