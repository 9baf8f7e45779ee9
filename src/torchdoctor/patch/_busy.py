"""Remedies that change how many cores the script uses, and rewrites, measured on a busy machine.

A DataLoader's workers and torch's threads are the script's claim on the machine's cores, so what
a remedy that changes them gains depends on the cores other processes leave free while it runs:
alternating the rounds puts the load on both sides, but it does not give the workers back the
cores the load took. Measured while other processes took cores (any run's
``SystemUsage.others_cpu_cores`` at least :data:`~torchdoctor.analysis.firmness.BUSY_CORES`), a
"slower" or "no clear gain" tells of the load as much as of the remedy (beside other tests the
demo's loader remedy, 1.50x on a quiet machine, measured 0.95x): it is judged "could not tell",
with the load in its words, and not kept. A gain measured beside that load stands: the remedy
paid with the cores that were left, but its figure is that moment's, which the report says (the
demo's loader remedy, 1.43x quiet, measured 1.31x to 3.23x beside two processes busy in spells:
a script's processes take a larger share of the cores the more of them it runs).

The same for a patch of rewrites alone (kept on their losses, timed only so that a slower one is
not written): they change host round-trips, which cost little on a CPU, so a slower reading beside
that load is the load's (the demo's rewrites then read 0.87x "slower on this device"), and a gain
of theirs measured then is "could not tell" too (beside other tests: 1.48x, their mean steps 4%
apart): either way they are written on their losses, as on a quiet machine (CI beside a busy loop
once read seed 004's three rewrites slower in all five rounds, and wrote nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..analysis.compare import IMPROVED, NO_CHANGE, REGRESSED
from ..analysis.firmness import busiest
from ..record import UNCLEAR, JudgedSpeedup
from ._remedies import LOADER, LOADER_AND_THREADS, THREADS

#: The remedies that set how many cores the script's workers and threads use.
CORE_REMEDIES = frozenset({LOADER, THREADS, LOADER_AND_THREADS})
#: Why a reading of rewrites alone on a busy machine is the load's.
REWRITES_CHANGE = "the rewrites change only host round-trips, which cost little on this device"


def load_aside(loads: Iterable[float | None]) -> str:
    """`` while other processes took up to N cores`` on a busy machine, else ``""``: said
    beside a reading the load may have made."""
    most = busiest(loads)
    return f" while other processes took up to {most:.1f} cores" if most is not None else ""


def busy_doubt(
    remedies: Iterable[str], loads: Iterable[float | None], rewrites: bool = False
) -> str:
    """Why load could have made remedies ``remedies`` (``rewrites``: rewrites alone, kept on
    their losses) look slower or no faster, or ``""``."""
    most = busiest(loads)
    if most is None or (not rewrites and not CORE_REMEDIES & set(remedies)):
        return ""
    changes = (
        REWRITES_CHANGE
        if rewrites
        else "it changes how many cores the script's workers and threads use"
    )
    return (
        f"other processes took up to {most:.1f} cores while its rounds ran, and {changes}, so "
        "the load moved its figure as much as the patch could; run `torchdoctor fix` again at a "
        "quieter moment"
    )


def paired_loads(
    a: dict[tuple[int, int], float | None], b: dict[tuple[int, int], float | None]
) -> list[float | None]:
    """The load of every run of the rounds (keys) both ``a`` and ``b`` ran."""
    return [side[r] for r in a if r in b for side in (a, b)]


def busy_gain_notes(remedies: Iterable[str], loads: Iterable[float | None]) -> list[str]:
    """What to read a gain of core-setting ``remedies`` measured on a busy machine with (none
    where the machine was quiet or the remedies set no cores)."""
    most = busiest(loads)
    if most is None or not CORE_REMEDIES & set(remedies):
        return []
    return [
        f"measured while other processes took up to {most:.1f} cores: what the DataLoader's "
        "workers and torch's threads gain depends on the cores left free, so at a quieter "
        "moment the figure may be smaller or larger"
    ]


def busy_patch(
    judged: JudgedSpeedup,
    kept: frozenset[str],
    loads: Iterable[float | None],
    rewrites: frozenset[str] = frozenset(),
) -> JudgedSpeedup:
    """The whole patch's judgement (``kept``: its remedies; ``rewrites``: those kept on their
    losses) on a busy machine: slower is "could not tell"; so is a gain of rewrites alone, which
    cannot gain on this device what the load can (the demo's rewrites beside other tests: 1.48x
    "faster", the mean steps 4% apart), and they are kept on their losses."""
    loads = list(loads)
    alone = bool(kept) and kept <= rewrites
    doubt = busy_doubt(kept, loads, alone)
    if doubt and judged.judgement == REGRESSED:
        return replace(judged, judgement=UNCLEAR, why=doubt)
    if doubt and alone and judged.judgement == IMPROVED:
        why = (
            f"other processes took up to {busiest(loads):.1f} cores while its rounds ran, and "
            f"{REWRITES_CHANGE}: the figure is the load's; they are kept on their losses"
        )
        return replace(judged, judgement=UNCLEAR, why=why)
    return judged


def unless_busy(
    judged: JudgedSpeedup, remedies: Iterable[str], loads: Iterable[float | None]
) -> JudgedSpeedup:
    """``judged``, or the same figure judged :data:`~torchdoctor.record.UNCLEAR` where it says
    slower or no clear gain and :func:`busy_doubt` has a doubt."""
    if judged.judgement not in (REGRESSED, NO_CHANGE):
        return judged
    why = busy_doubt(remedies, loads)
    return replace(judged, judgement=UNCLEAR, why=why) if why else judged
