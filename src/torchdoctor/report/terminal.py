"""The terminal report of a run record (rich)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..analysis.compare import RUN_TO_RUN, pair_words
from ..analysis.verdict import CEILING_NO_GAIN, ceiling_words
from ..record import (
    COMPLETE,
    IMPROVED,
    INTERNAL_ERROR,
    INTERRUPTED,
    KILLED,
    NO_TRAINING,
    OUT_OF_MEMORY,
    PARTIAL,
    REGRESSED,
    SCRIPT_ERROR,
    STEP_PARTS,
    TIMED_OUT,
    FixTrial,
    JudgedSpeedup,
    RunRecord,
)
from ..record.part_names import PART_LABELS
from ._style import BAD, GOOD, PART_COLOURS, ending_look, severity_look, verdict_look
from ._words import (
    AS_RUN,
    MODEL_ALONE,
    command_words,
    environment_rows,
    firm_words,
    share_words,
)
from .distributed import breakdown_title, ranks_section
from .loader import loader_section
from .patch import patch_section
from .trials import trials_section
from .whole_run import whole_run_section


def render(record: RunRecord, console: Console | None = None, title: str | None = None) -> None:
    """Print the whole report of ``record`` (an ``analyze`` record as ``analyze`` draws it)."""
    console = console or Console()
    if record.is_trace_analysis:
        from .trace_terminal import render_trace_report

        render_trace_report(record, console)
        return
    console.print(_header(record, title))
    whole = whole_run_section(record)
    if whole is not None:
        console.print(whole)
    if record.verdict is not None:
        console.print(_verdict_panel(record))
    ranks = ranks_section(record)
    if ranks is not None:
        console.print(ranks)
    if record.measured_steps:
        console.print(_breakdown_table(record))
        console.print(_counterfactual_table(record))
    trials = trials_section(record)
    if trials is not None:
        console.print(trials)
    section = loader_section(
        record.loader_report, current_workers=record.loader.num_workers if record.loader else None
    )
    if section is not None:
        console.print(section)
    if record.trace is not None and record.trace.analysed:
        from .trace_terminal import render_trace_section

        files = ", ".join(record.trace.recorded_files)
        console.print(Text(f"profiler trace: {files}", style="italic"))
        render_trace_section(record, console)
    if record.findings:
        console.print(_findings_table(record))
    console.print(_environment_table(record))
    if record.notes:
        for note in record.notes:
            console.print(Text(f"note: {note}", style="dim"))
    if record.fix is not None:
        render_fix(record, record.fix, console)
    patch = patch_section(record)
    if patch is not None:
        console.print(patch)
    console.print()


def render_fix(record: RunRecord, trial: FixTrial, console: Console | None = None) -> None:
    """The ``--fix`` trial: what was injected, predicted and verified speedup, the code change."""
    console = console or Console()
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    if not trial.overrides and trial.threads is None:
        grid.add_row(
            "Fix",
            "nothing to inject: no DataLoader setting was found to help; the findings above "
            "need code changes",
        )
        console.print(Panel(grid, title="fix", title_align="left", border_style="green"))
        return
    grid.add_row("Injected", f"{_one_line(trial.code)}  (no code edited)")
    before = record.step_ms.mean if record.step_ms else None
    verified = trial.verified
    if verified is not None and verified.allowance is None and before:
        # a record from before the fix was judged: one re-run against the diagnosis
        after = trial.after_step_ms or 0.0
        text = f"{verified.speedup:.2f}x  (mean step {before:.1f} ms -> {after:.1f} ms)"
        grid.add_row("Verified", Text(text, style=GOOD))
    elif verified is not None:
        grid.add_row("Verified", fix_verdict_text(trial))
    else:
        grid.add_row("Verified", Text("the re-run measured no step", style=BAD))
    if trial.predicted_speedup:
        grid.add_row("Predicted", f"{trial.predicted_speedup:.2f}x by the worker sweep")
    grid.add_row("Make it permanent", _permanent(trial))
    console.print(
        Panel(grid, title="fix, verified by re-running", title_align="left", border_style="green")
    )


def fix_verdict_text(trial: FixTrial) -> Text:
    """The fix's verification in words, judged as ``compare`` judges (its interval, each pair
    of re-runs' own speedup, or the allowance two runs of one script differ by here; the
    rounds)."""
    verified = trial.verified or JudgedSpeedup(0.0)
    speedup, allowance = verified.speedup, verified.allowance
    lo, hi = verified.interval or (speedup, speedup)
    if trial.pairs:
        noise = f"{lo:.2f}-{hi:.2f}; each pair {pair_words(trial.pairs)}"
    else:
        noise = f"{lo:.2f}-{hi:.2f}" + (
            f"; runs differ by up to {allowance:.0%} here" if allowance else ""
        )
    steps = ""
    if trial.before_step_ms and trial.after_step_ms:
        steps = f", mean step {trial.before_step_ms:.1f} -> {trial.after_step_ms:.1f} ms"
    rounds = f" over {trial.rounds} alternated rounds" if trial.rounds else ""
    if verified.judgement == REGRESSED:
        return Text(f"{verified.word}: {speedup:.2f}x ({noise}){steps}{rounds}", style=BAD)
    if verified.judgement == IMPROVED:
        return Text(f"{speedup:.2f}x faster ({noise}){steps}{rounds}", style=GOOD)
    if trial.pairs:
        why = f"not every pair shows it beyond {allowance or RUN_TO_RUN:.0%}"
    else:
        why = "within what two runs of the script differ by"
    return Text(f"{verified.word}: {speedup:.2f}x ({noise}){steps}{rounds}: {why}", style="yellow")


def _one_line(code: str | None) -> str:
    return "; ".join((code or "").splitlines())


def _permanent(trial: FixTrial) -> str:
    """The code change in words: the DataLoader's arguments, the thread count at the start."""
    changes = []
    if trial.overrides:
        loader_line = (trial.code or "").splitlines()[0]
        where = f" at {trial.where}" if trial.where else ""
        changes.append(f"change the DataLoader{where} to {loader_line}")
    if trial.threads is not None:
        changes.append(f"call torch.set_num_threads({trial.threads}) at the start of the script")
    return " and ".join(changes)


def stop_line(record: RunRecord) -> str:
    """The one line that says how the run ended."""
    measured = record.measured_steps
    whole = record.whole_run
    if whole is not None and record.status == COMPLETE:
        return (
            f"torchdoctor watched the whole run, {whole.steps} steps, to the script's own end; "
            f"{_steps(measured)} measured part by part for the verdict."
        )
    if whole is not None and record.status in (INTERRUPTED, TIMED_OUT, KILLED):
        return (
            f"the run was cut after {whole.steps} steps ({record.status}); the accounts cover it "
            "until then."
        )
    if record.status == COMPLETE:
        phases = [f"{record.warmup_steps} warmup", f"{measured} measured"]
        if record.model_alone:
            phases.append(f"{len(record.model_alone)} model-alone")
        text = f"torchdoctor stopped the script on purpose after {', '.join(phases)} steps"
        if record.loader_alone:
            text += f" and {record.loader_alone.batches} loader-alone batches"
        return text + "."
    if record.ending is not None and record.ending.cause == "uneven-join":
        return (
            "torchdoctor stopped the job where Join let every rank go (a rank's data ran out "
            f"first); {_steps(measured)} measured."
        )
    return {
        PARTIAL: f"the script ended on its own; {_steps(measured)} measured.",
        INTERRUPTED: f"interrupted; partial report of {_steps(measured, 'measured ')}.",
        SCRIPT_ERROR: f"the script failed; {_steps(measured)} measured before the error.",
        OUT_OF_MEMORY: f"{_oom_words(record)}; {_steps(measured)} measured before it.",
        NO_TRAINING: "no training step was measured.",
        INTERNAL_ERROR: "torchdoctor failed and stopped the script; see the note below.",
        KILLED: f"the script's process was killed; {_steps(measured)} measured before.",
        TIMED_OUT: f"stopped at the --max-seconds bound; {_steps(measured)} measured.",
    }.get(record.status, record.status)


def _oom_words(record: RunRecord) -> str:
    """Which memory ran out, where and how much was asked (the ending's words)."""
    words = record.ending.words if record.ending is not None else ""
    return words or "the script ran out of memory"


def _steps(n: int, kind: str = "") -> str:
    """``1 step was`` / ``3 steps were`` (or ``1 measured step``, with ``kind``)."""
    if kind:
        return f"{n} {kind}step" + ("" if n == 1 else "s")
    return f"{n} step was" if n == 1 else f"{n} steps were"


def _header(record: RunRecord, title: str | None) -> Text:
    text = Text()
    text.append("torchdoctor ", style="bold cyan")
    text.append(title or command_words(record) or "run")
    text.append("\n")
    text.append(stop_line(record), style="dim")
    return text


def ending_words(record: RunRecord) -> str:
    """How a run that did not complete its measurement ended, in one sentence: what its ending
    says ended it first (the rank that ended a job, its uneven inputs, a stall), else the stop
    line."""
    if record.ending is not None and record.ending.words:
        return record.ending.words
    return stop_line(record)


def _verdict_panel(record: RunRecord) -> Panel:
    v = record.verdict
    assert v is not None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    ending = ending_look(record.status) if not record.is_trace_analysis else None
    if ending is not None:  # first, in the verdict's place: how the run ended
        grid.add_row(
            "Ended", Text.assemble((ending.label, ending.style), " ", ending_words(record))
        )
    look = verdict_look(v.kind)
    doubt = firm_words(v)
    grid.add_row(
        "Verdict",
        Text.assemble((look.label, look.style), (f"  {doubt}", "yellow") if doubt else ""),
    )
    grid.add_row("Why", v.why)
    grid.add_row("Next", v.next)
    if v.shares:
        grid.add_row("Shares", "  ".join(share_words(v)))
    if record.ceiling_speedup is not None:
        grid.add_row("Ceiling", ceiling_words(record))
    border = "cyan" if ending is None else ending.style.split()[-1]
    return Panel(grid, title="diagnosis", title_align="left", border_style=border)


def _breakdown_table(record: RunRecord) -> Table:
    table = Table(title=breakdown_title(record), title_justify="left")
    table.add_column("part")
    table.add_column("mean", justify="right")
    table.add_column("median", justify="right")
    table.add_column("p90", justify="right")
    table.add_column("share", justify="right")
    table.add_column("", min_width=20)
    total = sum(record.steps.step_ms) or 1.0
    for name in STEP_PARTS:
        stat = record.parts_ms.get(name)
        if stat is None:
            continue
        share = sum(record.steps.part(name)) / total
        table.add_row(
            PART_LABELS[name],
            f"{stat.mean:.2f}",
            f"{stat.median:.2f}",
            f"{stat.p90:.2f}",
            f"{share * 100:.0f}%",
            Text("█" * round(share * 20), style=PART_COLOURS[name].hex),
        )
    if record.step_ms:
        table.add_row(
            Text("step", style="bold"),
            Text(f"{record.step_ms.mean:.2f}", style="bold"),
            Text(f"{record.step_ms.median:.2f}", style="bold"),
            Text(f"{record.step_ms.p90:.2f}", style="bold"),
            "100%",
            "",
        )
    return table


def _counterfactual_table(record: RunRecord) -> Table:
    table = Table(title="counterfactuals", title_justify="left")
    table.add_column("measurement")
    table.add_column("result", justify="right")
    if record.step_ms:
        table.add_row(AS_RUN, _stat_text(record.step_ms))
    ma = record.model_alone_step_ms
    if ma:
        table.add_row(f"step, {MODEL_ALONE}", _stat_text(ma))
    else:
        table.add_row(f"step, {MODEL_ALONE}", Text("not measured", style="dim"))
    ceiling = record.ceiling_speedup
    if ceiling is not None:
        table.add_row(
            "ceiling speedup from fixing the input",
            f"{ceiling:.2f}x"
            if ceiling >= CEILING_NO_GAIN
            else f"none (no faster: {ceiling:.2f}x)",
        )
    la = record.loader_alone
    if la:
        table.add_row("loader alone", f"{la.batches_per_s:.1f} batches/s")
        if la.needed_batches_per_s:
            table.add_row("model consumes", f"{la.needed_batches_per_s:.1f} batches/s")
    return table


def _stat_text(stat) -> str:
    return f"mean {stat.mean:.2f} ms (median {stat.median:.2f}, p90 {stat.p90:.2f})"


def _findings_table(record: RunRecord) -> Group:
    items: list = [Text("findings, most costly first", style="italic")]
    for i, f in enumerate(record.findings, 1):
        head = Text(f"{i}. ")
        severity = severity_look(f.severity)
        head.append(f"[{severity.label}] ", style=severity.style)
        head.append(f.title, style="bold")
        items.append(head)
        library = f.detail.get("library") if f.detail else None
        if library and f.detail.get("via"):
            # Where the library makes the call, then the user's line that leads there.
            items.append(Text(f"   in {library} at {f.detail['via'][0]}", style="cyan"))
            if f.detail.get("library_source"):
                items.append(Text(f"   {f.detail['library_source']}", style="dim"))
            if f.file:
                items.append(Text(f"   from your line {f.file}:{f.line}", style="cyan"))
        elif f.file:
            items.append(Text(f"   at {f.file}:{f.line}", style="cyan"))
        if f.source:
            items.append(Text(f"   {f.source.strip()}", style="dim"))
        items.append(
            Text("   fix: ", style="green").append(f.fix.replace("\n", "\n        "), style="")
        )
    return Group(*items)


def _environment_table(record: RunRecord) -> Group:
    rows = environment_rows(record)
    if not rows:
        return Group()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    for name, words in rows:
        grid.add_row(name, words)
    return Group(Text("environment", style="italic"), grid)
