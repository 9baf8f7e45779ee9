"""``torchdoctor fix``: diagnose, write the measured remedies into the user's code as a patch,
measure the patched code against the original, keep what pays (docs/fix.md).

1. The script is diagnosed as ``torchdoctor run`` does (supervised, bounded).
2. Each remedy the diagnosis measured is planned at the place in the code where its setting
   lives (:mod:`._remedies`), on the concrete syntax tree: the user's formatting and comments
   stay, and what cannot be changed safely is left out with the reason.
3. The original, each remedy's patched code and the whole patch run in alternation
   (:mod:`._measure`); patched files are run from a temporary folder as the originals
   (:mod:`torchdoctor.process.patched`), the user's files untouched.
4. Remedies judged faster beyond the noise make the diff; the others are dropped, with why.
   ``--apply`` writes it into the user's files, after copying them to a backup folder.
"""

from __future__ import annotations

import dataclasses
import shutil
import stat
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._errors import EXIT_INTERRUPTED, EXIT_OK, TorchdoctorError
from .._paths import ignored_dir, lies_under, where
from ..options import RunOptions
from ..record import (
    COMPLETE,
    INTERRUPTED,
    PARTIAL,
    Patch,
    PatchChange,
    PatchRemedy,
    PatchSkip,
    RunRecord,
    Trial,
    write_bytes_atomic,
)
from ..record.lever_names import FOREACH
from ._edits import PatchError, Skipped
from ._levers import LEVERS, plan_lever
from ._measure import RECHECK_STEPS, Interrupted, measure_patch
from ._project import Project, project_root
from ._remedies import (
    LOADER_AND_THREADS,
    TITLES,
    Remedy,
    plan_loader,
    plan_optimizer,
)
from ._syncs import plan_syncs
from ._threads import plan_threads

#: Default rounds of alternated runs (each round runs every variant once).
DEFAULT_ROUNDS = 2
#: The backup folder ``--apply`` copies the originals to, under the project's root.
BACKUP_DIR = ".torchdoctor-backup"


def fix_cli(
    target,
    options: RunOptions,
    out: str,
    apply: bool = False,
    rounds: int = DEFAULT_ROUNDS,
    apply_within: str | None = None,
) -> int:
    """Run ``torchdoctor fix`` (see the module's docstring); returns the exit status."""
    from ..process import printing, resolve_target, run_supervised
    from ..report.patch import patch_lines
    from ..report.progress import ProgressDisplay
    from ..report.terminal import render

    script = resolve_target(target)
    if options.nproc_per_node:
        raise TorchdoctorError(
            "fix measures one process; --nproc-per-node is not supported",
            "run `torchdoctor fix -- SCRIPT` on a single-process version of the script",
        )
    with ProgressDisplay(enabled=not options.quiet) as display:
        outcome = run_supervised(target, options, progress=display.update)
    record, status = outcome.record, outcome.exit_status
    if status != EXIT_OK or record.status != COMPLETE:
        record.patch = Patch(root=str(project_root(script)))
        record.patch.notes.append(_not_patched(record, status))
    else:
        status, project = patch_record(target, options, record, out, rounds)
        patch = record.patch
        assert patch is not None
        if patch.diff and apply and status == EXIT_OK:
            kept = [r.key for r in patch.remedies if r.kept]
            outside = _outside(project, kept, apply_within) if apply_within else None
            if outside is not None:
                patch.notes.append(
                    f"not applied: {outside} lies outside {apply_within} (--apply-within); no "
                    "file was changed, the diff is written (the backups go under the project's "
                    f"root, {project.root}: allow a folder that holds it, or apply the diff)"
                )
            else:
                patch.backup = str(_apply(project, kept))
                patch.applied = True
    _save(record, options)
    with printing():
        render(record)
        for line in patch_lines(record.patch):
            print(line)
        if options.json_path:
            print(f"run record written to {where(options.json_path)}")
        if options.html_path:
            print(f"HTML report written to {options.html_path}")
    return status


def _not_patched(record: RunRecord, status: int) -> str:
    """Why nothing was patched, by how the diagnosis ended: a script that ran out of data or
    epochs before it finished is to run longer, not "fixed" (nothing stopped it)."""
    if status == EXIT_INTERRUPTED:
        return f"the diagnosis was {INTERRUPTED}: nothing was patched (run fix again)"
    if record.status == PARTIAL:
        return (
            f"the script ended on its own (its data or epochs ran out) after "
            f"{record.measured_steps} measured steps, before the diagnosis had what the patch "
            "needs: nothing was patched; let it run longer (more epochs or data) or lower "
            "--steps, then run fix again"
        )
    return (
        f"the diagnosis ended {record.status}: nothing was patched (fix what the report says "
        "stopped the script first)"
    )


def patch_record(
    target, options: RunOptions, record: RunRecord, out: str, rounds: int = DEFAULT_ROUNDS
) -> tuple[int, Project]:
    """Plan the remedies of a diagnosed ``record`` in the script's project, measure them, and
    write the diff of what is kept to ``out``; the patch is ``record.patch``. The exit status
    (130 when interrupted while measuring) and the project, its edits planned."""
    from ..process import resolve_target

    project = Project(resolve_target(target))
    patch = record.patch = Patch(root=str(project.root))
    remedies = plan(record, project, target.argv)
    patch.remedies = [_remedy_record(r, project) for r in remedies]
    active = [r for r in remedies if r.changes]
    if not remedies:
        patch.notes.append(
            "no measured remedy is one the patcher writes (DataLoader settings, torch threads, "
            "host round-trip rewrites, and with --try: the optimizer's fused step, amp, "
            "channels-last, compile): see the findings for what to change by hand"
        )
    status = EXIT_OK
    if active:
        run = _runner(target, options, record, quiet=options.quiet)
        status = measure_patch(project, patch, active, run, rounds)
    if patch.diff:
        patch.path = str(Path(out).resolve())
        kept = [r.key for r in patch.remedies if r.kept]
        write_bytes_atomic(out, project.diff_bytes(kept))
        patch.notes.extend(project.comment_notes(kept))
    elif Path(out).exists():
        patch.notes.append(f"{out} is left as it was: it is an earlier run's, not this one's")
    return status, project


def plan(record: RunRecord, project: Project, argv: Sequence[str]) -> list[Remedy]:
    """The remedies the record's findings ask for, planned in the project's code."""
    from ..loader import fix_settings, fix_threads

    remedies = []
    settings = fix_settings(record.findings)
    threads = fix_threads(record.findings)
    sweep = next(
        (f for f in record.findings if f.kind in ("loader.num_workers", "loader.num_threads")),
        None,
    )
    because = sweep.title if sweep is not None else "the loader doctor's findings"
    where = record.loader.created_at if record.loader else None
    loader = None
    if settings:
        if where:
            current = {
                "num_workers": record.loader.num_workers,
                "pin_memory": record.loader.pin_memory,
                "persistent_workers": record.loader.persistent_workers,
                "prefetch_factor": record.loader.prefetch_factor,
            }
            loader = plan_loader(project, where, settings, argv, because, current)
        else:
            loader = Remedy("loader", because)
            loader.skipped.append(
                Skipped("DataLoader", "the run did not see where the DataLoader is built")
            )
        remedies.append(loader)
    if threads is not None:
        files = [Path(where.rpartition(":")[0])] if where else []
        if loader is not None:
            # the sweep picked workers and threads together: one remedy, measured together
            loader.key, loader.title = LOADER_AND_THREADS, TITLES[LOADER_AND_THREADS]
            for source in project.files.values():
                source.rekey("loader", LOADER_AND_THREADS)
        joined = plan_threads(project, threads, files, because, loader)
        if joined is not loader:
            remedies.append(joined)
    foreach = next((t for t in record.trials if t.name == FOREACH and t.status == "measured"), None)
    if foreach is not None and foreach.detail.get("where") and _paid(foreach):
        remedies.append(
            plan_optimizer(
                project,
                foreach.detail["where"],
                foreach.detail.get("optimizer", ""),
                foreach.detail.get("flag", "foreach"),
                argv,
                _because(foreach),
            )
        )
    for trial in record.trials:
        if trial.name in LEVERS and _paid(trial):
            remedies.append(plan_lever(project, trial.name, trial.detail, _because(trial)))
    remedies += plan_syncs(project, record.findings)
    return remedies


def _paid(trial: Trial) -> bool:
    """A trial measured faster than the script as it runs (the patch is then measured anew)."""
    return trial.status == "measured" and trial.judged is not None and trial.judged.speedup > 1


def _because(trial: Trial) -> str:
    speedup = trial.judged.speedup if trial.judged is not None else 0.0
    return f"--try {trial.name} measured {speedup:.2f}x in the script's own loop"


def _remedy_record(remedy: Remedy, project: Project) -> PatchRemedy:
    return PatchRemedy(
        key=remedy.key,
        title=remedy.title,
        because=remedy.because,
        changes=[PatchChange(project.rel(c.file), c.line, c.what) for c in remedy.changes],
        skipped=[PatchSkip(s.setting, s.reason) for s in remedy.skipped],
        reason="" if remedy.changes else "nothing to change that the patcher can write",
        numerics=remedy.numerics,
        caveat=remedy.caveat,
    )


def _runner(target, options: RunOptions, record: RunRecord, quiet: bool):
    """One measuring run: the diagnosis's steps and warmup, stretched as the ``--fix`` re-run
    stretches them (whole rounds of workers, their start-up skipped), nothing else measured."""
    from ..loader import fix_settings, rerun_window
    from ..process import run_supervised
    from ..report.progress import ProgressDisplay

    settings = fix_settings(record.findings)
    before = record.loader.num_workers if record.loader else 0
    workers = max(before or 0, int(settings.get("num_workers", before) or 0))
    steps, warmup = rerun_window(workers, options.steps, options.warmup, settings)
    measuring = options.measuring_only(steps=steps, warmup=warmup)

    def run(overrides: Mapping[str, str], label: str, losses: int = 0) -> RunRecord:
        if not quiet:
            print(f"torchdoctor fix: measuring {label}", file=sys.stderr, flush=True)
        options = dataclasses.replace(measuring, source_overrides=overrides)
        if losses:  # the numerics check: seeded, its first losses kept, few steps, its syncs
            # watched (a rewritten round-trip must be gone from the patched script)
            options = dataclasses.replace(
                options, steps=losses, warmup=0, loss_values=losses, sync_steps=RECHECK_STEPS
            )
        with ProgressDisplay(enabled=not quiet) as display:
            outcome = run_supervised(target, options, progress=display.update)
        if outcome.exit_status == EXIT_INTERRUPTED:  # also a signal that came as it ended
            raise Interrupted
        return outcome.record

    return run


def _outside(project: Project, remedies: Sequence[str], folder: str) -> str | None:
    """The first file ``--apply`` would write (a patched file, the backup folder) that is not
    under ``folder``, symlinks followed; ``None`` when all are."""
    for path in [*project.patched(remedies), project.root / BACKUP_DIR]:
        if not lies_under(path, folder):
            return str(path)
    return None


def _apply(project: Project, remedies: Sequence[str]) -> Path:
    """Write the patch into the user's files, each first copied to a backup folder (returned)."""
    changed = project.patched(remedies)
    backup = ignored_dir(project.root / BACKUP_DIR, time.strftime("%Y%m%d-%H%M%S"))
    for path in changed:
        copy = backup / project.rel(path)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, copy)
    for path, data in changed.items():
        write_bytes_atomic(path, data, mode=stat.S_IMODE(path.stat().st_mode))
    return backup


def _save(record: RunRecord, options: RunOptions) -> None:
    if options.json_path:
        record.save(options.json_path)
    if options.html_path:
        from ..report.html import write_html

        write_html(record, options.html_path)


def check_patchable(script: Path) -> None:
    """Fail before anything runs when the script itself cannot be parsed by the patcher."""
    try:
        Project(script, root=script.resolve().parent).source(script)
    except PatchError as exc:
        raise TorchdoctorError(
            str(exc), "fix the file so Python can parse it, or run `torchdoctor run` instead"
        ) from None
