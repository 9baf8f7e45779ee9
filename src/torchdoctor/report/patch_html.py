"""The ``torchdoctor fix`` section of the HTML page: each remedy with its measured figure and
fate, the changes at ``file:line``, and the diff itself, its lines coloured."""

from __future__ import annotations

from html import escape

from ..record import PatchRemedy, RunRecord
from .patch import figure_words, patch_lines, whole_lines


def patch_section(record: RunRecord) -> str:
    """The section of ``record.patch`` (empty without one)."""
    patch = record.patch
    if patch is None:
        return ""
    rows = "".join(_row(r) for r in patch.remedies)
    table = (
        "<table class='patch'><tr><th>remedy</th><th>changes</th><th class='n'>measured</th>"
        f"<th>in the patch</th></tr>{rows}</table>"
        if rows
        else ""
    )
    whole = "".join(
        f"<p class='good'>{escape(line)}</p>" if faster else f"<p>{escape(line)}</p>"
        for line, faster in whole_lines(patch)
    )
    where = "".join(f"<p class='muted'>{escape(line)}</p>" for line in patch_lines(patch))
    notes = "".join(f"<li>{escape(n)}</li>" for n in patch.notes)
    diff = f"<pre class='diff'>{_diff_lines(patch.diff)}</pre>" if patch.diff else ""
    return (
        '<section id="patch"><h2>Fix: the remedies as a patch, measured on the patched code</h2>'
        f"{table}{whole}{where}{diff}"
        + (f"<ul class='muted'>{notes}</ul>" if notes else "")
        + "</section>"
    )


def _row(remedy: PatchRemedy) -> str:
    changes = "".join(
        f"<div><code>{escape(c.file)}:{c.line}</code> {escape(c.what)}</div>"
        for c in remedy.changes
    ) + "".join(
        f"<div class='muted'>left out: {escape(s.setting)}: {escape(s.reason)}</div>"
        for s in remedy.skipped
    )
    if remedy.caveat:
        changes += f"<div class='bad'>caveat: {escape(remedy.caveat)}</div>"
    figure = figure_words(remedy)
    fate = (
        "<span class='good'>kept</span>"
        if remedy.kept
        else f"<span class='bad'>dropped</span> {escape(remedy.reason)}"
    )
    return (
        f"<tr><td><b>{escape(remedy.title)}</b><div class='muted'>{escape(remedy.because)}</div>"
        f"</td><td>{changes}</td><td class='n'>{figure}</td><td>{fate}</td></tr>"
    )


def _diff_lines(diff: str) -> str:
    out = []
    for line in diff.splitlines():
        css = (
            "hd"
            if line.startswith(("---", "+++", "@@"))
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else ""
        )
        text = escape(line)
        out.append(f"<span class='{css}'>{text}</span>" if css else text)
    return "\n".join(out)
