"""The job section of the terminal report: every rank of a distributed run side by side.

Drawn from ``record.distributed`` alone (a saved job record renders the same), right after the
verdict: which rank is the straggler and who waits for it, how much of the step is communication,
and the traceback of a rank that raised.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from ..record import COMPLETE, STEP_PARTS, STRAGGLER, DistributedReport, RankRun, RunRecord, Stat
from ..record.part_names import OPTIONAL_PARTS, PART_HEADERS, PART_WORDS, parts_shown
from ._style import BAD, verdict_look
from ._words import projection_lines, rank_label, role_words, waiting_words

#: Lines of a failed rank's traceback that are shown (its end, where the error is).
TRACEBACK_LINES = 15


def ranks_section(record: RunRecord) -> Group | None:
    """The job's ranks, stragglers and communication; ``None`` for a single-process record."""
    job = record.distributed
    if job is None:
        return None
    items: list = [_title(job), _RanksTable(job)]
    items.extend(_summary_lines(job))
    for rank in job.ranks:
        if rank.error:
            items.extend(_traceback(rank))
    return Group(*items)


def breakdown_title(record: RunRecord) -> str:
    """The title of the step breakdown: which rank's steps it shows in a job record."""
    job = record.distributed
    if job is None:
        return "step breakdown (ms per step)"
    rank = record.env.rank if record.env is not None else job.bounding_rank
    which = f"rank {rank}"
    if any(s.rank == rank for s in job.stragglers):
        which += " (the straggler)"
    return f"step breakdown of {which} (ms per step)"


# --- the pieces ------------------------------------------------------------------------------


def _title(job: DistributedReport) -> Text:
    text = Text("job: ", style="bold cyan")
    ranks = "rank" if job.world_size == 1 else "ranks"
    line = f"{job.world_size} {ranks} on {job.nnodes} node(s)"
    if job.backend:
        line += f", backend {job.backend}"
    return text.append(line, style="bold")


#: The per-rank table's columns: key, header, whether it holds a figure (right-aligned, never cut).
_COLUMNS = [
    ("rank", "rank", False),
    ("status", "status", False),
    ("step", "step", True),
    *((part, PART_HEADERS[part], True) for part in STEP_PARTS),
    ("no_sync", "no-sync\nstep", True),
    ("comm", "comm/\nwait", True),
    ("own", "own\nwork", True),
    ("role", "role", False),
    ("verdict", "own\nverdict", False),
]
#: On a console too narrow for every column: the step parts go to a table of their own.
_SUMMARY_KEYS = ("rank", "status", "step", "no_sync", "comm", "own", "role", "verdict")
_PARTS_KEYS = ("rank", "step", *STEP_PARTS)


class _RanksTable:
    """One row per rank; as two tables (the step parts apart) where one does not fit."""

    def __init__(self, job: DistributedReport) -> None:
        self.job = job
        self.rows = [_row(r, job) for r in job.ranks]
        shown = parts_shown(r.parts_ms for r in job.ranks)
        #: An optional part (evaluation) no rank had is no column.
        self.hidden = OPTIONAL_PARTS - set(shown)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        every = [key for key, _, _ in _COLUMNS if key not in self.hidden]
        if self._width(every) <= options.max_width:
            yield self._table(every, "ranks (mean ms per step)")
            return
        yield self._table(_SUMMARY_KEYS, "ranks (mean ms per step)")
        parts = [key for key in _PARTS_KEYS if key not in self.hidden]
        yield self._table(parts, "step parts of each rank (mean ms per step)")

    def _width(self, keys: Sequence[str]) -> int:
        """The table's width with no figure cut and the role wrapped at most to its words."""
        total = 0
        for key, header, _ in _COLUMNS:
            if key not in keys:
                continue
            if key == "rank" and self.job.nnodes > 1:
                header = "rank\nhost:local"
            texts = [str(row[key]) for row in self.rows]
            words = [w for t in texts for w in t.split()] if key == "role" else texts
            total += max(len(x) for x in [*header.split("\n"), *words])
        return total + 2 * len(keys) + 1

    def _table(self, keys: Sequence[str], title: str) -> Table:
        estimated = "comm" in keys and any(
            r.comm_ms is None and r.own_ms is not None for r in self.job.ranks
        )
        timed = "comm" in keys and any(
            not r.no_sync and (r.torch_collectives_ms or r.collectives_ms) for r in self.job.ranks
        )
        table = Table(
            title=title,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
            caption=(
                "comm/wait without a no-sync phase: backward and forward time beyond the "
                "fastest rank's"
                if estimated
                else "comm/wait: the collectives timed where the step waited for them (FSDP2's, "
                "the script's own)"
                if timed
                else None
            ),
            caption_justify="left",
        )
        for key, header, figure in _COLUMNS:
            if key not in keys:
                continue
            if key == "rank" and self.job.nnodes > 1:
                header = "rank\nhost:local"
            if figure:
                table.add_column(header, justify="right", no_wrap=True)
            else:
                table.add_column(header, no_wrap=key != "role")
        for row in self.rows:
            table.add_row(*(row[key] for key in keys))
        return table


def _row(r: RankRun, job: DistributedReport) -> dict[str, str | Text]:
    return {
        "rank": rank_label(r, job),
        "status": Text(r.status, style="" if r.status == COMPLETE else BAD),
        "step": _mean(r.step_ms),
        **{part: _mean(r.parts_ms.get(part)) for part in STEP_PARTS},
        "no_sync": _mean(r.no_sync_step_ms),
        "comm": _ms(_comm_or_wait(r)),
        "own": _ms(r.own_ms),
        "role": role_text(r, job),
        "verdict": _verdict(r),
    }


def _mean(stat: Stat | None) -> str:
    return f"{stat.mean:.1f}" if stat is not None else "-"


def _ms(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def _comm_or_wait(r: RankRun) -> float | None:
    """The no-sync measurement's communication time, else the estimated wait (step less own)."""
    if r.comm_ms is not None:
        return r.comm_ms
    if r.own_ms is None or r.step_ms is None:
        return None
    return max(r.step_ms.mean - r.own_ms, 0.0)


def role_text(r: RankRun, job: DistributedReport) -> Text:
    """A rank's role in words (``straggler``, ``waits for rank 1``), a straggler in bold red."""
    return Text(role_words(r, job), style=f"bold {BAD}" if r.role == STRAGGLER else "")


def _verdict(r: RankRun) -> Text:
    if r.verdict is None:
        return Text("-", style="dim")
    look = verdict_look(r.verdict.kind)
    return Text(look.label, style=look.style)


def _summary_lines(job: DistributedReport) -> list[Text]:
    lines = []
    for s in job.stragglers:
        victims = ", ".join(str(v) for v in s.victims)
        line = Text("straggler: ", style=f"bold {BAD}")
        line.append(
            f"rank {s.rank}, slowest in {PART_WORDS.get(s.part, s.part)}, "
            f"{s.excess_ms:.1f} ms more own work per step than the other ranks; "
            f"rank(s) {victims} wait {s.wait_ms:.1f} ms per step for it"
        )
        lines.append(line)
    if job.skew_ms is not None:
        lines.append(Text(f"skew: own work differs by {job.skew_ms:.1f} ms per step across ranks"))
    if job.no_sync_step_ms is not None:
        line = f"communication made free (no_sync): step {job.no_sync_step_ms:.1f} ms"
        if job.comm_ceiling is not None:
            line += f", a ceiling of {job.comm_ceiling:.2f}x from hiding communication"
        lines.append(Text(line))
    if job.scaling_efficiency is not None:
        lines.append(
            Text(
                f"scaling efficiency: {job.scaling_efficiency * 100:.0f}% of the step is the "
                f"ranks' own work"
            )
        )
    lines.extend(Text(line) for line in projection_lines(job))
    if job.missing_ranks:
        missing = ", ".join(str(m) for m in job.missing_ranks)
        lines.append(
            Text(
                f"missing: rank(s) {missing} sent nothing (their process ended before any "
                f"measurement)",
                style=BAD,
            )
        )
    for r in job.ranks:
        if r.ended and r.status != COMPLETE:
            lines.append(Text(f"rank {r.rank}: {r.ended}", style=BAD))
        if r.stopped_at:
            lines.append(Text(f"rank {r.rank}: when stopped, at {r.stopped_at}{waiting_words(r)}"))
    return lines


def _traceback(r: RankRun) -> list[Text]:
    lines = [line for entry in r.error for line in entry.splitlines()]
    shown = lines[-TRACEBACK_LINES:]
    head = Text(f"rank {r.rank} raised", style=f"bold {BAD}")
    if len(lines) > len(shown):
        head.append(f"  (last {len(shown)} of {len(lines)} lines)", style="dim")
    return [head, *(Text(f"   {line.rstrip()}", style="dim") for line in shown)]
