"""The ``torchdoctor fix`` section of the terminal report: each remedy, where it changes the code,
what it measured on the patched code, and whether the diff keeps it."""

from __future__ import annotations

import shlex

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from ..record import (
    GONE,
    IMPROVED,
    REGRESSED,
    UNCLEAR,
    JudgedSpeedup,
    Patch,
    PatchRemedy,
    RunRecord,
)
from ._style import BAD, GOOD


def patch_section(record: RunRecord) -> RenderableType | None:
    """The panel of ``record.patch``, or ``None`` when the record has none."""
    patch = record.patch
    if patch is None:
        return None
    parts: list[RenderableType] = []
    for remedy in patch.remedies:
        parts.append(_remedy_lines(remedy))
    parts.append(_whole(patch))
    for note in patch.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Panel(
        Group(*parts),
        title="fix: the remedies written as a patch, measured on the patched code",
        title_align="left",
        border_style="green" if patch.diff else "yellow",
    )


def _remedy_lines(remedy: PatchRemedy) -> Text:
    """The remedy's title, measured figure and fate, then one line per change and left-out
    setting."""
    text = Text()
    text.append(remedy.title, style="bold")
    text.append(f"\n  {_figure(remedy)} · ")
    text.append_text(_kept(remedy))
    for change in remedy.changes:
        text.append(f"\n  {change.file}:{change.line}  {change.what}")
    for skip in remedy.skipped:
        text.append(f"\n  left out: {skip.setting}: {skip.reason}", style="yellow")
    if remedy.caveat:
        text.append(f"\n  caveat: {remedy.caveat}", style="yellow")
    return text


def _figure(remedy: PatchRemedy) -> str:
    return figure_words(remedy) or "not measured"


def _kept(remedy: PatchRemedy) -> Text:
    if remedy.kept:
        return Text("kept in the patch", style=GOOD)
    return Text(f"dropped: {remedy.reason}" if remedy.reason else "dropped", style=BAD)


def _whole(patch: Patch) -> Text:
    text = Text()
    for line, faster in whole_lines(patch):
        text.append(line + "\n", style=GOOD if faster else "")
    text.rstrip()
    return text


def whole_lines(patch: Patch) -> list[tuple[str, bool]]:
    """The whole patch in words, each line with whether it says a measured gain: its figure
    (when measured), whether nothing was written and why, whether it was applied."""
    lines = []
    judged = patch.judged
    if judged is not None and judged.interval is not None:
        faster = judged.judgement == IMPROVED
        measured = (
            f"{judged_figure(judged)}, mean step {patch.before_ms:.1f} → "
            f"{patch.after_ms:.1f} ms over {patch.rounds} alternated rounds"
        )
        # Not faster: the judgement leads, the figure after it (a kept rewrite's noise once
        # headlined "0.33x" as if the patch were three times slower).
        if faster:
            line = f"The patch: {measured}."
        elif judged.judgement == REGRESSED:
            line = f"The patch: slower on this device (measured {measured})."
        elif judged.judgement == UNCLEAR:
            line = f"The patch: could not tell (measured {measured}): {judged.why}."
        else:
            line = f"The patch: no faster beyond the noise on this device (measured {measured})."
        lines.append((line, faster))
    if not patch.diff:
        lines.append(
            (
                "No patch written: no remedy was kept (each says why above)."
                if patch.remedies
                else "No patch: nothing the patcher writes was found to change.",
                False,
            )
        )
    if patch.applied:
        lines.append(("Applied to your files (the originals are kept: see below).", False))
    return lines


def patch_lines(patch: Patch) -> list[str]:
    """Where the diff and the backup went, as plain lines (printed unwrapped, to be copied)."""
    lines = []
    if patch.applied and patch.backup:
        lines.append(
            f"patch applied to your files (the diff is kept at {patch.path}); the originals "
            f"are in {patch.backup}"
        )
    elif patch.path:
        # the commands quoted for a shell: a folder with a space in its name pastes as it is
        root, path = shlex.quote(patch.root), shlex.quote(patch.path)
        lines.append(
            f"patch written to {patch.path} (apply it: cd {root} && git apply {path}, or "
            f"patch -p1 < {path})"
        )
    return lines


def figure_words(remedy: PatchRemedy) -> str:
    """What a remedy measured, in words: its speedup and interval, or for a rewrite judged by
    its numerics, the losses it was checked on."""
    if remedy.numerics:
        if remedy.checked_losses:
            words = f"same losses over {remedy.checked_losses} steps"
            if remedy.rechecked == GONE:
                words += "; the sync finder no longer finds it"
            elif remedy.rechecked:
                words += f"; the sync finder {remedy.rechecked}"
            return words
        return "numerics not checked"
    if remedy.judged is None or remedy.judged.interval is None:
        return ""
    return judged_figure(remedy.judged)


def judged_figure(judged: JudgedSpeedup) -> str:
    """``1.78x (1.70–1.85)``, with ``its rounds read against the load each run saw (as timed:
    1.11x, 3.18x)`` after it for a figure judged on corrected rounds."""
    corrected = judged.as_timed_words()
    return judged.figure("–", "()") + (f", {corrected}" if corrected else "")
