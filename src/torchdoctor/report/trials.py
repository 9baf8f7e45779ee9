"""The trials table (``run --try``) and the step's FLOPs line of the terminal report."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..record import IMPROVED, JUDGEMENT_WORDS, NO_CHANGE, Flops, RunRecord, Trial
from ._style import BAD, GOOD
from ._words import byte_size

#: Warm-up of a compile trial longer than this many of its steps is shown as compile time.
_COMPILE_SHOWN = 3
#: A trial that frees this share of the activations held for backward shows its code, whatever
#: its speedup: it buys memory with time (activation checkpointing).
MEMORY_FREED = 0.10


def trials_section(record: RunRecord) -> Group | None:
    """The measured trials, best first, with the code to paste; ``None`` without trials."""
    if not record.trials and record.flops is None:
        return None
    parts: list = []
    if record.flops is not None:
        parts.append(flops_line(record.flops))
    if record.trials:
        parts.append(_table(record))
        for trial in record.trials:
            parts.extend(_details(trial))
    return Group(*parts)


def flops_line(flops: Flops) -> Text:
    counted = "FLOPs counted per step" if flops.partial else "FLOPs per step"
    text = f"{counted} {_si(flops.per_step)}FLOP ({flops.dtype})"
    if flops.params is not None:
        text += f", {_si(flops.params)} parameters"
    if flops.achieved_flops_per_s is not None:
        text += f"; achieved {_si(flops.achieved_flops_per_s)}FLOP/s"
    if flops.utilisation is not None:
        peak = "measured matmul peak" if flops.peak_source.startswith("measured") else "peak"
        at_least = "at least " if flops.partial else ""
        text += f" = {at_least}{flops.utilisation * 100:.1f}% of the {peak} ({flops.peak_source})"
    if flops.partial:
        ops = ", ".join(
            u["op"] + (f" {u['share'] * 100:.0f}%" if u.get("share") is not None else "")
            for u in flops.uncounted
        )
        text += (
            f"; partial: the counter has no formula for {ops} (share of the step's op time), "
            "so the model's arithmetic is more than counted"
        )
    return Text(text)


def _table(record: RunRecord) -> Table:
    title = (
        "trials, best first (speedup = median step of the script as it runs, measured just "
        "before and after the trial / the trial's median step)"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("trial")
    table.add_column("changed")
    table.add_column("speedup", justify="right")
    table.add_column("90% interval", justify="right")
    table.add_column("judgement")
    for t in record.trials:
        interval = t.judged.interval_words() if t.judged is not None else ""
        speed = f"{t.judged.speedup:.2f}x" if t.judged is not None else ""
        table.add_row(t.name, t.changed, speed, interval, _judgement(t))
    return table


def worth_it(t: Trial) -> bool:
    """A trial measured faster beyond the noise (its code is worth pasting)."""
    return t.status == "measured" and t.judged is not None and t.judged.judgement == IMPROVED


def trial_word(t: Trial) -> str:
    """A measured trial's judgement in words (``worth it``, ``no clear gain``, ``slower``,
    ``could not tell``)."""
    return t.judged.word if t.judged is not None else JUDGEMENT_WORDS[NO_CHANGE]


def _judgement(t: Trial) -> Text:
    if t.status == "skipped":
        return Text(f"skipped: {t.reason}", style="dim")
    if t.status == "failed":
        return Text(f"failed: {t.reason}", style=BAD)
    tone = t.judged.tone if t.judged is not None else ""
    return Text(trial_word(t), style={"good": GOOD, "bad": BAD}.get(tone, ""))


def unclear_line(t: Trial) -> str | None:
    """Why a trial's figure cannot be its lever's (``could not tell``), and what to do."""
    if t.judged is None or not t.judged.why:
        return None
    return f"{t.name}: could not tell: {t.judged.why}; try it again at a quieter moment"


def compile_line(t: Trial) -> str | None:
    """A compile trial's first step, when it took longer than its steps: the compile time."""
    if t.name == "compile" and len(t.warmup_ms) >= 1 and t.step_ms is not None:
        compile_ms = t.warmup_ms[0] - t.step_ms.mean
        if compile_ms > _COMPILE_SHOWN * t.step_ms.mean:
            return (f"compile: first step {t.warmup_ms[0] / 1000:.1f} s (compile time, "
                    "not in the speedup)")  # fmt: skip
    return None


def graph_break_lines(t: Trial) -> list[str]:
    """One line per graph break the compile trial saw: where, the source line, why."""
    out = []
    for b in t.detail.get("graph_breaks") or []:
        where = f"{b['file']}:{b['line']}" if b.get("file") else "?"
        out.append(f"graph break at {where}: {b.get('source', '')}  ({b['reason']})")
    return out


def points_line(t: Trial) -> str | None:
    """The settings a trial tried (batch sizes, thread counts), each measured, and its pick."""
    if not t.points:
        return None
    rows = ", ".join(
        f"{p.setting}: "
        + (f"{p.samples_per_s:.0f} samples/s" if p.samples_per_s is not None else
           f"{p.step_ms.mean:.2f} ms" if p.step_ms else "")
        + (f" ({p.memory_mb:.0f} MB)" if p.memory_mb is not None else "")
        for p in t.points
    )  # fmt: skip
    pick = f"; pick {t.pick}" if t.pick else "; no pick (no setting is worth it)"
    return f"{t.name}: {rows}{pick}"


def memory_line(t: Trial) -> str | None:
    """What a trial that trades time for memory held, counted in a step without it and one with
    it: the activations held for backward and, on a device with allocator statistics, the peak."""
    before, after = t.detail.get("activations_before"), t.detail.get("activations_after")
    if before is None or after is None:
        return None
    text = f"{t.name}: activations held for backward {byte_size(before)} -> {byte_size(after)}"
    peak_before, peak_after = t.detail.get("peak_before"), t.detail.get("peak_after")
    at_most = t.detail.get("held_at_most")
    if at_most is not None and not (peak_before and peak_after):
        # no allocator peak (the CPU): the backward rebuilds a block at a time on top of them
        text += f", {byte_size(at_most)} at most during the backward (a block rebuilt at a time)"
        after = at_most
    if before:
        text += f" ({after / before - 1:+.0%})"
    if peak_before and peak_after:
        text += (
            f"; the step's peak on {t.detail.get('device', 'the device')} "
            f"{byte_size(peak_before)} -> {byte_size(peak_after)}"
        )
    if t.judged is not None:
        text += f"; the step {t.judged.speedup:.2f}x as fast"
    return text


def frees_memory(t: Trial) -> bool:
    """A measured trial that freed at least :data:`MEMORY_FREED` of the activations held at
    once (with a block rebuilt in the backward, where the trial counts one)."""
    before = t.detail.get("activations_before")
    after = t.detail.get("held_at_most", t.detail.get("activations_after"))
    return (
        t.status == "measured"
        and bool(before)
        and after is not None
        and after <= (1 - MEMORY_FREED) * before
    )


def paste_title(t: Trial) -> str | None:
    """Why a trial's code is shown (``None``: it is not): it is faster, or it frees memory."""
    if not t.code:
        return None
    if worth_it(t):
        return f"{t.name}: paste"
    if frees_memory(t):
        return f"{t.name}: paste, where memory is what you need"
    return None


def _details(t: Trial) -> list:
    if t.status != "measured":
        return []
    out: list = []
    unclear = unclear_line(t)
    if unclear:
        out.append(Text(f"  {unclear}"))
    compiled = compile_line(t)
    if compiled:
        out.append(Text(compiled))
    out.extend(Text(f"  {line}", style=BAD) for line in graph_break_lines(t))
    points = points_line(t)
    if points:
        out.append(Text(f"  {points}", style="dim"))
    memory = memory_line(t)
    if memory:
        out.append(Text(f"  {memory}"))
    title = paste_title(t)
    if title:
        out.append(Text(f"  {title}", style=GOOD))
        out.extend(Text(f"    {line}") for line in t.code.splitlines())
        out.extend(Text(f"    caveat: {c}", style="dim") for c in t.caveats)
    return out


def _si(value: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} "
