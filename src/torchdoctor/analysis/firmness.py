"""Whether a verdict is firm, or one that the load on a busy machine could have flipped (pure).

On a quiet machine the verdict stands as decided. On a busy one (other processes took
:data:`BUSY_CORES` or more while the steps were measured) two
things can make it a product of the load rather than of the script:

- **The steps disagree.** The measured steps are resampled (:data:`RESAMPLES` bootstrap
  resamples, seeded) and the verdict decided again on each. When fewer than
  :data:`FIRM_AGREEMENT` of them give the verdict, load that came and went during the steps
  moved the shares across a boundary; every kind given by :data:`CANDIDATE_SHARE` of them or
  more is a candidate.
- **The script's threads waited for cores.** Where the kernel tells it (``system.waits``, the
  training thread's run-queue time), a training thread that waited :data:`WAITING_SHARE` of
  the steps' time or more makes any verdict not firm: that time fell in whichever part was
  running, and it is no part's work. Where it does not, the waiting is inferred when torch's
  threads and what the other processes took need more cores than the machine has: forward and
  backward ran in part waiting for a core (beside other jobs, one loop's forward and backward
  went from about 4 ms to 220 ms a step that way), and a verdict that the model's compute
  leads is not firm. The same script on a quieter machine may be bound by something else.

Steps too short for the machine's CPU counters (under
:data:`~torchdoctor.record.MIN_CPU_WINDOW_S` in all) leave the other processes' load unmeasured;
there the training thread's measured waiting alone decides (:func:`unseen_load_waited`): beside a
busy-looping process, 3 steps of a 1 ms loop came out HOST-BOUND, firm, with the thread waiting
for a core 35% of their time (quiet, the loop is COMPUTE-BOUND).

A verdict that is not firm keeps its kind (what was measured), says so in its ``why`` with the
evidence, lists its ``candidates``, and its ``next`` starts with what to do about the doubt
(a quieter moment, more steps, fewer threads); "input fixes will not help" is never said.

Two records compared (``analysis.compare``) were measured at two moments: :func:`load_doubt`
says when the load on the machine differed between them enough to have made the judgement, and
:func:`wait_doubt` when their training threads' waiting for a core did.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace

from ..record import (
    COMPUTE_BOUND,
    IMPROVED,
    MIN_CPU_WINDOW_S,
    NO_CHANGE,
    REGRESSED,
    RunRecord,
    Stat,
    StepSeries,
    ThreadWaits,
    Verdict,
)
from ..record.part_names import STEP_PARTS
from .short_run import MIN_VERDICT_STEPS

#: Cores' worth of CPU other processes must take while the steps are measured for the machine
#: to be called busy (the figures then run slower and scatter more than on a quiet machine).
BUSY_CORES = 0.25
#: Bootstrap resamples of the measured steps.
RESAMPLES = 200
#: Share of the resamples that must give the verdict for it to be firm on a busy machine.
FIRM_AGREEMENT = 0.9
#: Share of the resamples that makes a kind a candidate.
CANDIDATE_SHARE = 0.1
#: Share of the measured steps' time the training thread spent ready to run but waiting for a
#: core that makes a verdict on a busy machine not firm. Quiet, a small MLP's training thread
#: waited 0.1 ms of 182 ms of steps; beside two busy loops 3.1 s of 6.2 s (50%), its steps 36x
#: as long.
WAITING_SHARE = 0.1
#: Said of a verdict whose steps were too short for the machine's CPU counters (the others' load
#: then unmeasured) when the training thread waited for a core (:func:`unseen_load_waited`):
#: other processes, or the script's own threads, workers or ranks, may have kept it waiting.
UNSEEN_LOAD = (
    f"the load on the machine went unmeasured (the measured steps took under "
    f"{MIN_CPU_WINDOW_S:g} s, too little for its CPU counters), so other processes or the "
    "script's own threads may have kept it waiting"
)
#: The least waiting, in all, that :func:`unseen_load_waited` counts: in a window of a few
#: milliseconds one preemption reaches any share (quiet, a small MLP's training thread waited
#: 0.1 ms in 182 ms of steps; beside a busy loop, 2 ms in 6 ms).
UNSEEN_MIN_WAIT_S = 0.001
#: What a compute-bound verdict said of input that is not said when it is not firm.
NO_INPUT_HELP = "; input fixes will not help"


def resampled_kinds(
    record: RunRecord, decide: Callable[[RunRecord], Verdict], rounds: int = RESAMPLES
) -> Counter[str]:
    """How often each verdict kind is decided on resamples of the measured steps."""
    steps = record.steps
    n = len(steps.step_ms)
    rng = random.Random(0)
    parts = {p: steps.part(p) for p in STEP_PARTS}
    counts: Counter[str] = Counter()
    for _ in range(rounds):
        series = StepSeries()
        for i in (rng.randrange(n) for _ in range(n)):
            series.add_step({p: parts[p][i] for p in STEP_PARTS}, steps.batches[i])
        view = replace(record, steps=series, step_ms=Stat.of(series.step_ms))
        counts[decide(view).kind] += 1
    return counts


def waiting_for_cores(record: RunRecord) -> str:
    """Words for the script's time spent waiting for a core, or ``""``: measured (the training
    thread's run-queue time, :class:`~torchdoctor.record.ThreadWaits`) where the kernel tells
    it, else inferred from torch's threads needing more cores than other processes left free."""
    env, others = record.env, others_cores(record)
    threads = ""
    if env is not None and others is not None and env.cpu_logical and env.torch_threads:
        threads = (
            f"torch's {env.torch_threads} threads shared {env.cpu_logical} cores with other "
            f"processes that took {others:.1f}"
        )
    waits, per_step = thread_waits(record), waited_ms(record)
    if waits is not None and per_step is not None:
        share = waits.waited_share()
        if share < WAITING_SHARE:
            return ""
        return (
            f"the training thread waited for a core {per_step:.1f} "
            f"ms of each {record.step_ms.mean:.1f} ms step ({share:.0%} of the measured time, "
            "the kernel's run-queue figure): waiting is no part's work, not the model's compute"
            + (f": {threads}" if threads else "")
        )
    if not threads or env is None or others is None:
        return ""
    if env.torch_threads <= env.cpu_logical - others:
        return ""
    return f"{threads}, so forward and backward ran in part waiting for a core"


def thread_waits(record: RunRecord) -> ThreadWaits | None:
    """The script's threads' work and waiting, where the record tells them (not inferred)."""
    return record.system.waits if record.system is not None else None


def unseen_load_waited(record: RunRecord) -> bool:
    """Whether the other processes' load went unmeasured (the steps too short for the CPU
    counters) while the training thread, measured, waited for a core :data:`WAITING_SHARE` of
    the steps' time, and :data:`UNSEEN_MIN_WAIT_S`, or more: the load can then have decided
    the verdict, seen or not."""
    waits = thread_waits(record)
    return (
        others_cores(record) is None
        and waits is not None
        and waits.training_waited_s >= UNSEEN_MIN_WAIT_S
        and waits.waited_share() >= WAITING_SHARE
    )


def firm(
    record: RunRecord, verdict: Verdict, decide: Callable[[RunRecord], Verdict], busy: str
) -> Verdict:
    """``verdict``, or the same kind marked not firm (the module's docstring). ``busy`` is the
    busy machine's words (``""`` on a quiet machine: the verdict stands, unless the load went
    unmeasured and the training thread waited, :func:`unseen_load_waited`). A run with too few
    steps for a verdict already says so, and what to do."""
    if not (busy or unseen_load_waited(record)) or len(record.steps.step_ms) < MIN_VERDICT_STEPS:
        return verdict
    counts = resampled_kinds(record, decide)
    total = sum(counts.values())
    agreed = counts[verdict.kind] / total if total else 1.0
    candidates = [k for k, c in counts.most_common() if c >= CANDIDATE_SHARE * total]
    doubts = []
    if agreed < FIRM_AGREEMENT:
        others = [k for k in candidates if k != verdict.kind]
        doubts.append(
            f"resampled, the measured steps give {verdict.kind} in {agreed:.0%} of draws"
            + (f" and {' or '.join(others)} in the rest" if others else "")
        )
    # Measured waiting is in whichever part it fell; inferred, it is forward's and backward's.
    waiting = (
        waiting_for_cores(record)
        if thread_waits(record) is not None or verdict.kind == COMPUTE_BOUND
        else ""
    )
    if waiting and not busy:  # the load went unmeasured: the thread's waiting alone tells it
        waiting = f"{UNSEEN_LOAD}: {waiting}"
    if waiting:
        doubts.append(waiting)
    if not doubts:
        return verdict
    if verdict.kind not in candidates:
        candidates.insert(0, verdict.kind)
    advice = "run it again at a quieter moment, or with more --steps"
    if waiting:
        advice += ", or with fewer threads (torchdoctor run --try threads measures them)"
    return replace(
        verdict,
        why=f"{verdict.why}; not a firm answer: {'; '.join(doubts)}",
        next=f"{advice}; then {verdict.next.replace(NO_INPUT_HELP, '')}",
        firm=False,
        candidates=candidates,
    )


def busiest(loads: Iterable[float | None]) -> float | None:
    """The most cores other processes took in ``loads`` (each run's ``others_cpu_cores``,
    ``None``: not measured) where that is :data:`BUSY_CORES` or more; else ``None``."""
    known = [x for x in loads if x is not None]
    return max(known) if known and max(known) >= BUSY_CORES else None


def others_cores(record: RunRecord) -> float | None:
    """Cores' worth of CPU other processes took while the record's steps were measured."""
    return record.system.others_cpu_cores if record.system is not None else None


def load_doubt(kind: str, a_others: float | None, b_others: float | None) -> str:
    """Why the load on the machine could have made judgement ``kind``, or ``""``.

    Two records are measured at two moments; other processes that took more of the machine
    during one run's steps slowed that run alone (the same script twice, beside bursts of
    another job's load, compared 1.24x; a small MLP beside two busy loops, against itself
    quiet, 136x). When the two runs' loads (``others_cpu_cores``) differ by :data:`BUSY_CORES`
    or more, or one is busy and the other's was not measured, a judgement the load's direction
    explains is not given: ``IMPROVED`` when A ran the busier, ``REGRESSED`` when B did, ``NO
    CHANGE`` either way (the load can hide a change as well as make one). A judgement against
    the load stands: B faster although B ran the busier is, if anything, understated.
    """
    known = [x for x in (a_others, b_others) if x is not None]
    if not known or max(known) < BUSY_CORES:
        return ""  # no load seen on either side
    if len(known) == 2 and abs(known[0] - known[1]) < BUSY_CORES:
        return ""  # alike loads: a steady job beside both
    a_busier = b_others is None or (a_others is not None and a_others > b_others)
    if not {IMPROVED: a_busier, REGRESSED: not a_busier, NO_CHANGE: True}.get(kind, False):
        return ""
    busier, quieter = ("A", "B") if a_busier else ("B", "A")
    low = min(known) if len(known) == 2 else None
    during = (
        f"{low:.1f} during {quieter}'s"
        if low is not None
        else f"an unmeasured share during {quieter}'s"
    )
    return (
        f"could not tell: other processes took {max(known):.1f} cores while {busier}'s steps "
        f"were measured and {during}, so the load moved {busier}'s steps as much as any change "
        "could; compare runs taken side by side (`torchdoctor fix` alternates the two scripts) "
        "or both at a quiet moment"
    )


#: Share of a judged change the training thread's extra waiting for a core must reach to have
#: made it.
WAIT_EXPLAINS = 0.5


def waited_ms(record: RunRecord) -> float | None:
    """Milliseconds a measured step the training thread waited for a core (``None``: not read).
    One thread's waiting lies inside the step's wall time, so it compares with it (the sum over
    threads would not: torch's spinning pool threads wait beside it)."""
    waits, steps = thread_waits(record), len(record.steps.step_ms)
    return waits.training_waited_s * 1e3 / steps if waits is not None and steps else None


def same_threads(a: RunRecord, b: RunRecord) -> bool:
    """Whether the two runs ran the same threads: torch's count and the loader's workers (when
    they did not, their waiting is theirs to differ in: fewer threads wait less)."""
    ta = (a.env.torch_threads if a.env else None, a.loader.num_workers if a.loader else None)
    tb = (b.env.torch_threads if b.env else None, b.loader.num_workers if b.loader else None)
    return ta == tb


def wait_doubt(kind: str, a: RunRecord, b: RunRecord, scale: float, allowance: float) -> str:
    """Why the training thread's waiting for a core could have made judgement ``kind`` of B
    against A, or ``""``. ``scale`` is B's samples per step over A's (steps compared per
    sample when the batches differ).

    Load another process puts beside a run shows in the run's own threads: they wait in the
    kernel's run queue. The same input-bound loop twice, one run beside other tests' processes,
    compared 0.80x [0.75-0.88] while the machine-wide load figure differed by less than
    :data:`BUSY_CORES`. Between two runs of the same threads (a change of threads or workers
    changes the waiting itself: that is the change), the judgement is not given when the slower
    run's training thread waited more a step than the faster's by :data:`WAIT_EXPLAINS` of the
    steps' difference or more (for no change: by ``allowance`` of the step, enough to hide a
    change the size of the allowance).
    """
    wa, wb = waited_ms(a), waited_ms(b)
    if wa is None or wb is None or not same_threads(a, b) or scale <= 0:
        return ""
    sa, sb = statistics.fmean(a.steps.step_ms), statistics.fmean(b.steps.step_ms) / scale
    extra, change = wb / scale - wa, sb - sa
    if kind == REGRESSED:
        made = change > 0 and extra >= WAIT_EXPLAINS * change
    elif kind == IMPROVED:
        made = change < 0 and -extra >= WAIT_EXPLAINS * -change
    elif kind == NO_CHANGE:
        made = abs(extra) >= allowance * min(sa, sb)
    else:
        made = False
    if not made:
        return ""
    return (
        f"could not tell: the training thread waited for a core {wa:.1f} ms a step in A and "
        f"{wb:.1f} ms in B (the kernel's run-queue time), as much as any change could move the "
        "steps; compare runs taken side by side (`torchdoctor fix` alternates the two scripts) "
        "or both at a quiet moment"
    )
