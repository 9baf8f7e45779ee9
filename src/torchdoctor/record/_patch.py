"""``torchdoctor fix`` in the record: the patch written, and what each of its remedies measured.

Produced by :func:`torchdoctor.patch.fix_cli` and saved in ``RunRecord.patch``
(docs/fix.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._judged import JudgedSpeedup


@dataclass
class PatchChange:
    """One change of the user's code, at a line of the original file."""

    #: The file, relative to the patch's root.
    file: str
    line: int
    #: In words: ``num_workers=0 → 4 added``.
    what: str


@dataclass
class PatchSkip:
    """A setting a remedy asks for that the patch leaves out, and why."""

    setting: str
    reason: str


#: ``PatchRemedy.rechecked`` of a rewrite whose round-trip the sync finder no longer finds.
GONE = "gone"


@dataclass
class PatchRemedy:
    """One remedy: its changes, measured on the patched code against the original."""

    #: ``loader``, ``threads``, or ``sync-N`` (a host round-trip rewritten).
    key: str
    #: ``DataLoader settings``, ``torch threads``.
    title: str
    #: What the diagnosis measured that asks for it.
    because: str
    changes: list[PatchChange] = field(default_factory=list)
    skipped: list[PatchSkip] = field(default_factory=list)
    #: Mean step of the original over the patched one (a throughput ratio), its 90% interval,
    #: and the judgement, as ``torchdoctor compare`` judges; ``None`` when not timed.
    judged: JudgedSpeedup | None = None
    #: A rewrite whose gain cannot show on a CPU (a host round-trip): judged by the losses the
    #: patched script computes, seeded, against the original's (kept: the same losses).
    numerics: bool = False
    #: Losses compared by that check.
    checked_losses: int = 0
    #: The sync finder on the patched script (the same seeded run), for a rewrite: ``gone``
    #: (its round-trip is no longer found), ``still found at FILE:LINE``, or "" (not watched).
    rechecked: str = ""
    #: What else it changes, said beside it (``amp``: the numerics).
    caveat: str = ""
    #: Whether the remedy is in the patch (only what measured faster is).
    kept: bool = False
    #: Why it is not, in words, when it is not.
    reason: str = ""


@dataclass
class Patch:
    """The patch ``torchdoctor fix`` wrote: its diff, its remedies, the whole patch measured."""

    #: The folder the diff's paths are relative to (``git apply`` / ``patch -p1`` there).
    root: str
    #: Where the diff was written (``None``: nothing to write).
    path: str | None = None
    #: The unified diff of the kept remedies.
    diff: str = ""
    remedies: list[PatchRemedy] = field(default_factory=list)
    #: The whole patch against the original (the kept remedies together), judged with its
    #: noise allowance; ``None`` when not measured.
    judged: JudgedSpeedup | None = None
    #: Mean steps (ms) of the original and of the patched script, over every alternated run.
    before_ms: float | None = None
    after_ms: float | None = None
    #: Rounds of alternated runs (original, each remedy, the whole patch) measured.
    rounds: int = 0
    #: ``--apply``: the user's files were changed; the originals were copied to ``backup``.
    applied: bool = False
    backup: str | None = None
    notes: list[str] = field(default_factory=list)
