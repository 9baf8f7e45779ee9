"""Choosing ``num_workers`` by measurement: the candidate list, the sweep's stop rule, the advice.

Pure: nothing here imports torch or measures anything. The capture side
(:mod:`torchdoctor.capture.loader_sweep`, or the runner's whole-step sweep) feeds measured
throughputs to a :class:`SweepPolicy` one setting at a time::

    policy = SweepPolicy(sweep_candidates(cpu_count, current))
    while (workers := policy.next()) is not None:
        policy.add(workers, measure(workers))
    sweep = policy.result()
    findings = sweep_advice(sweep, settings, accelerator=True, batches_per_epoch=len(loader))

A sweep works the same whether the throughput is of the loader alone (the model runs on an
accelerator, so workers do not compete with it) or of whole training steps (the model runs on
the CPU, so they do): the caller decides what ``batches_per_s`` means.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..record import Finding, LoaderSettings

#: Candidates stop at this many workers per logical CPU. Workers that wait on I/O (disk,
#: network, a sleep) can usefully outnumber cores; for CPU-bound work, going past twice the cores
#: only adds contention and ``prefetch_factor`` batches of memory per worker.
WORKERS_PER_CPU_BOUND = 2

#: Never sweep past this many workers, whatever the CPU count: each worker holds a copy of what
#: it touches of the dataset and ``prefetch_factor`` batches, and starting one costs time.
MAX_SWEEP_WORKERS = 32

#: A setting must beat the best earlier one by this fraction, or the sweep stops (a plateau).
#: Doubling the workers for less than 10% is not worth their memory, and run-to-run noise on a
#: shared machine is of the order of 5%.
PLATEAU_GAIN = 0.10

#: How many settings in a row may miss :data:`PLATEAU_GAIN` before the sweep stops.
PLATEAU_PATIENCE = 1

#: Once a setting delivers this multiple of the rate the model consumes, more workers cannot
#: shorten the step (the model is the bound); the headroom absorbs jitter in batch times.
TARGET_HEADROOM = 1.2

#: :meth:`SweepPolicy.best` picks the fewest workers within this fraction of the best measured
#: throughput: fewer workers means less memory and startup for a gain inside measurement noise.
DEFAULT_PICK_TOLERANCE = 0.05

#: Advise a new ``num_workers`` when it is predicted to speed the loader up by at least this.
MIN_WORTHWHILE_SPEEDUP = 1.10

#: Advise ``persistent_workers=True`` when starting the workers costs at least this share of an
#: epoch (they are restarted at every epoch without it).
PERSISTENT_WORKERS_STARTUP_SHARE = 0.05

#: Without a measured startup time, an epoch this short (in batches) is "short".
SHORT_EPOCH_BATCHES = 200

#: Advise a larger ``prefetch_factor`` when the slowest batches (p90) take this multiple of the
#: median, measured without workers (where the time between batches is the time to make one):
#: deeper queues absorb uneven per-batch work such as variable-size images.
JITTER_RATIO = 2.0

#: The ``prefetch_factor`` suggested for jittery loaders (the default is 2).
JITTERY_PREFETCH_FACTOR = 4

#: Advise a smaller ``prefetch_factor`` when the batches in flight would take this share of the
#: available RAM.
PREFETCH_RAM_SHARE = 0.25


def max_sweep_workers(cpu_count: int) -> int:
    """The largest ``num_workers`` a sweep tries on a machine with ``cpu_count`` logical CPUs.

    ``min(WORKERS_PER_CPU_BOUND * cpu_count, MAX_SWEEP_WORKERS)``, and at least 1.
    """
    return max(1, min(WORKERS_PER_CPU_BOUND * max(1, cpu_count), MAX_SWEEP_WORKERS))


def sweep_candidates(cpu_count: int, current: int) -> list[int]:
    """The ``num_workers`` values to try, in the order to try them.

    0, 1, 2, 4, 8, ... doubling up to :func:`max_sweep_workers` (the bound itself is included
    when it is not a power of two), plus the user's ``current`` setting so it is measured on the
    same footing, all ascending.

    Args:
        cpu_count: logical CPUs available to the process.
        current: the DataLoader's ``num_workers`` now.

    Returns:
        Distinct worker counts, ascending.
    """
    bound = max_sweep_workers(cpu_count)
    values = {0, bound}
    n = 1
    while n < bound:
        values.add(n)
        n *= 2
    if current >= 0:
        values.add(current)
    return sorted(values)


@dataclass
class SweepPoint:
    """One measured setting."""

    num_workers: int
    batches_per_s: float
    #: Time from creating the iterator to the first batch (worker startup), when measured.
    first_batch_ms: float | None = None
    #: Median and 90th percentile of the time between consecutive batches, when measured.
    batch_ms_median: float | None = None
    batch_ms_p90: float | None = None
    batches: int = 0


@dataclass
class WorkerSweep:
    """The result of a sweep: the measured curve and the chosen setting."""

    points: list[SweepPoint]
    best_workers: int
    #: Why the sweep stopped: "plateau", "target" (fast enough for the model) or "exhausted".
    stopped: str
    candidates: list[int]
    tolerance: float = DEFAULT_PICK_TOLERANCE
    target_batches_per_s: float | None = None
    #: "loader" (loader alone, model on an accelerator) or "step" (whole training steps).
    measures: str = "loader"
    seconds: float | None = None

    def point(self, num_workers: int) -> SweepPoint | None:
        """The measured point at ``num_workers``, if it was measured."""
        for p in self.points:
            if p.num_workers == num_workers:
                return p
        return None

    @property
    def best(self) -> SweepPoint:
        point = self.point(self.best_workers)
        assert point is not None
        return point

    def speedup_over(self, num_workers: int) -> float | None:
        """Measured throughput at the chosen setting over that at ``num_workers``."""
        other = self.point(num_workers)
        if other is None or other.batches_per_s <= 0:
            return None
        return self.best.batches_per_s / other.batches_per_s


class SweepPolicy:
    """Decides which ``num_workers`` to measure next and when to stop.

    Settings are tried in the order of ``candidates``. The sweep stops early when

    - a setting with 2 or more workers fails to beat every earlier setting by
      :data:`PLATEAU_GAIN` (``patience`` times in a row): a plateau, or a decline;
    - a setting reaches ``target_batches_per_s * TARGET_HEADROOM``: the model, not the loader,
      bounds the step from there on.

    The step from 0 to 1 worker is never a plateau: one worker only overlaps loading with the
    consumer, the gain comes from the second.
    """

    def __init__(
        self,
        candidates: Sequence[int],
        *,
        target_batches_per_s: float | None = None,
        plateau_gain: float = PLATEAU_GAIN,
        patience: int = PLATEAU_PATIENCE,
    ) -> None:
        if not candidates:
            raise ValueError("a sweep needs at least one candidate")
        self.candidates = sorted(set(candidates))
        self.target_batches_per_s = target_batches_per_s
        self.plateau_gain = plateau_gain
        self.patience = patience
        self.points: list[SweepPoint] = []
        self.stopped: str | None = None
        self._misses = 0

    def next(self) -> int | None:
        """The next ``num_workers`` to measure, or ``None`` when the sweep is over."""
        if self.stopped is not None:
            return None
        done = {p.num_workers for p in self.points}
        for n in self.candidates:
            if n not in done:
                return n
        self.stopped = "exhausted"
        return None

    def add(self, num_workers: int, batches_per_s: float, **measured: float | int | None) -> None:
        """Record the throughput measured at ``num_workers`` (extra fields go to the point)."""
        if not math.isfinite(batches_per_s) or batches_per_s < 0:
            raise ValueError(
                f"batches_per_s must be a finite non-negative number, got {batches_per_s}"
            )
        earlier_best = max((p.batches_per_s for p in self.points), default=None)
        self.points.append(SweepPoint(num_workers, batches_per_s, **measured))  # type: ignore[arg-type]
        target = self.target_batches_per_s
        if target is not None and batches_per_s >= target * TARGET_HEADROOM:
            self.stopped = "target"
            return
        if num_workers < 2 or earlier_best is None:
            return
        if batches_per_s < earlier_best * (1.0 + self.plateau_gain):
            self._misses += 1
            if self._misses >= self.patience:
                self.stopped = "plateau"
        else:
            self._misses = 0

    @property
    def curve(self) -> list[tuple[int, float]]:
        """``(num_workers, batches_per_s)`` of every measured setting, by worker count."""
        return sorted((p.num_workers, p.batches_per_s) for p in self.points)

    def best(self, tolerance: float = DEFAULT_PICK_TOLERANCE) -> int:
        """The fewest workers whose throughput is within ``tolerance`` of the best measured.

        With a target rate, "the best" is capped at ``target * TARGET_HEADROOM``: beyond what
        the model consumes, more throughput buys nothing.

        Raises:
            ValueError: when nothing was measured.
        """
        if not self.points:
            raise ValueError("nothing measured yet")
        return pick_workers(self.points, tolerance, self.target_batches_per_s)

    def result(
        self,
        tolerance: float = DEFAULT_PICK_TOLERANCE,
        *,
        measures: str = "loader",
        seconds: float | None = None,
    ) -> WorkerSweep:
        """The sweep so far as a :class:`WorkerSweep`."""
        return WorkerSweep(
            points=sorted(self.points, key=lambda p: p.num_workers),
            best_workers=self.best(tolerance),
            stopped=self.stopped or "incomplete",
            candidates=list(self.candidates),
            tolerance=tolerance,
            target_batches_per_s=self.target_batches_per_s,
            measures=measures,
            seconds=seconds,
        )


def pick_workers(
    points: Iterable[SweepPoint],
    tolerance: float = DEFAULT_PICK_TOLERANCE,
    target_batches_per_s: float | None = None,
) -> int:
    """The fewest workers within ``tolerance`` of the best (capped) throughput of ``points``."""
    ordered = sorted(points, key=lambda p: p.num_workers)
    enough = max(p.batches_per_s for p in ordered)
    if target_batches_per_s is not None:
        enough = min(enough, target_batches_per_s * TARGET_HEADROOM)
    for p in ordered:
        if p.batches_per_s >= enough * (1.0 - tolerance):
            return p.num_workers
    return ordered[-1].num_workers  # unreachable: the best point always qualifies


def sweep_advice(
    sweep: WorkerSweep,
    settings: LoaderSettings,
    *,
    accelerator: bool,
    batches_per_epoch: int | None = None,
    bytes_per_batch: int | None = None,
    available_ram_bytes: int | None = None,
) -> list[Finding]:
    """DataLoader settings to change, each with the exact code, from a measured sweep.

    Args:
        sweep: the measured sweep.
        settings: the DataLoader's settings now (from the run record).
        accelerator: whether the model runs on a GPU or another accelerator (pinned memory
            only helps host-to-device copies).
        batches_per_epoch: ``len(loader)`` when known; judges whether epochs are short.
        bytes_per_batch: size of one batch (see :mod:`torchdoctor.analysis.loader_memory`).
        available_ram_bytes: free RAM now, to keep the advised queues within it.

    Returns:
        Findings of kind ``loader.num_workers``, ``loader.pin_memory``,
        ``loader.persistent_workers`` and ``loader.prefetch_factor``, as warranted.
    """
    findings: list[Finding] = []
    chosen = sweep.best_workers
    best = sweep.best
    current = settings.num_workers
    speedup = sweep.speedup_over(current)
    curve = [[p.num_workers, round(p.batches_per_s, 3)] for p in sweep.points]
    what = "training steps" if sweep.measures == "step" else "batches from the loader alone"
    advise_workers = chosen != current and (speedup is None or speedup >= MIN_WORTHWHILE_SPEEDUP)
    if not advise_workers:
        # A gain inside the noise is no reason to change: the rest of the advice is for the
        # worker count the loader keeps.
        chosen = current
        best = sweep.point(current) or best
    if advise_workers:
        gain = f"{speedup:.2f}x the {what} per second" if speedup else "the best measured rate"
        extra = _worker_kwargs_for(chosen, settings)
        findings.append(
            Finding(
                kind="loader.num_workers",
                title=f"num_workers={current} -> {chosen}: {gain}",
                fix=f"DataLoader(..., num_workers={chosen}{extra})",
                severity="warning" if speedup is None or speedup >= 1.5 else "info",
                detail={
                    "current": current,
                    "recommended": chosen,
                    "predicted_speedup": speedup,
                    "measures": sweep.measures,
                    "curve": curve,
                    "stopped": sweep.stopped,
                    "best_batches_per_s": best.batches_per_s,
                },
            )
        )
    if accelerator and not settings.pin_memory:
        findings.append(
            Finding(
                kind="loader.pin_memory",
                title="batches are copied to the device from pageable memory",
                fix=(
                    "DataLoader(..., pin_memory=True)\n"
                    "x = x.to(device, non_blocking=True)  # the copy overlaps compute"
                ),
                severity="info",
                detail={
                    "why": "pinned host memory allows asynchronous host-to-device copies",
                    "recommended": True,
                },
            )
        )
    if chosen > 0 and not settings.persistent_workers:
        short, why = _epoch_is_short(best, batches_per_epoch)
        if short:
            findings.append(
                Finding(
                    kind="loader.persistent_workers",
                    title="workers are restarted at every epoch",
                    fix=f"DataLoader(..., num_workers={chosen}, persistent_workers=True)",
                    severity="info",
                    detail={"why": why, "first_batch_ms": best.first_batch_ms, "recommended": True},
                )
            )
    prefetch = _prefetch_advice(
        chosen, settings, sweep.point(0), bytes_per_batch=bytes_per_batch, ram=available_ram_bytes
    )
    if prefetch is not None:
        findings.append(prefetch)
    return findings


def _worker_kwargs_for(chosen: int, settings: LoaderSettings) -> str:
    """Arguments that must change with ``num_workers`` for the DataLoader to accept it."""
    if chosen == 0 and (settings.persistent_workers or settings.prefetch_factor):
        # DataLoader raises for these with num_workers=0.
        return ", persistent_workers=False, prefetch_factor=None"
    return ""


def _epoch_is_short(best: SweepPoint, batches_per_epoch: int | None) -> tuple[bool, str]:
    if best.first_batch_ms is not None and batches_per_epoch and best.batches_per_s > 0:
        epoch_ms = 1000.0 * batches_per_epoch / best.batches_per_s
        share = best.first_batch_ms / (best.first_batch_ms + epoch_ms)
        return (
            share >= PERSISTENT_WORKERS_STARTUP_SHARE,
            f"starting the workers takes {best.first_batch_ms:.0f} ms, "
            f"{100 * share:.0f}% of an epoch of {batches_per_epoch} batches",
        )
    if batches_per_epoch is not None:
        return (
            batches_per_epoch < SHORT_EPOCH_BATCHES,
            f"an epoch is {batches_per_epoch} batches (short: under {SHORT_EPOCH_BATCHES})",
        )
    return False, ""


def _prefetch_advice(
    chosen: int,
    settings: LoaderSettings,
    in_process: SweepPoint | None,
    *,
    bytes_per_batch: int | None,
    ram: int | None,
) -> Finding | None:
    if chosen == 0:
        return None
    factor = settings.prefetch_factor or 2
    if bytes_per_batch and ram:
        in_flight = bytes_per_batch * factor * chosen
        if in_flight > PREFETCH_RAM_SHARE * ram and factor > 1:
            smaller = max(1, int(PREFETCH_RAM_SHARE * ram // (bytes_per_batch * chosen)))
            smaller = min(smaller, factor - 1)
            return Finding(
                kind="loader.prefetch_factor",
                title=(
                    f"{chosen} workers x prefetch_factor {factor} keep "
                    f"{in_flight / 2**20:.0f} MB of batches in flight"
                ),
                fix=f"DataLoader(..., num_workers={chosen}, prefetch_factor={smaller})",
                severity="warning",
                detail={
                    "bytes_in_flight": in_flight,
                    "available_ram_bytes": ram,
                    "recommended": smaller,
                },
            )
    # Batch times are only comparable without workers: with them, batches arrive in bursts.
    if in_process is None:
        return None
    med, p90 = in_process.batch_ms_median, in_process.batch_ms_p90
    if med and p90 and p90 / med >= JITTER_RATIO and factor < JITTERY_PREFETCH_FACTOR:
        return Finding(
            kind="loader.prefetch_factor",
            title=f"batch times are uneven (p90 {p90:.0f} ms vs median {med:.0f} ms)",
            fix=(
                f"DataLoader(..., num_workers={chosen}, prefetch_factor={JITTERY_PREFETCH_FACTOR})"
            ),
            severity="info",
            detail={
                "batch_ms_median": med,
                "batch_ms_p90": p90,
                "recommended": JITTERY_PREFETCH_FACTOR,
            },
        )
    return None


#: The DataLoader arguments each loader finding sets, for ``--fix`` runs.
_FIX_ARGUMENTS = {
    "loader.num_workers": "num_workers",
    "loader.pin_memory": "pin_memory",
    "loader.persistent_workers": "persistent_workers",
    "loader.prefetch_factor": "prefetch_factor",
}


def fix_settings(findings: Iterable[Finding]) -> dict[str, Any]:
    """The DataLoader arguments to inject in a ``--fix`` run, from :func:`sweep_advice` findings.

    Consistent as a whole: with ``num_workers=0`` the worker-only arguments are reset (the
    DataLoader rejects them), otherwise unchanged ones are left out.
    """
    out: dict[str, Any] = {}
    for f in findings:
        name = _FIX_ARGUMENTS.get(f.kind)
        if name is not None and "recommended" in f.detail:
            out[name] = f.detail["recommended"]
    if out.get("num_workers") == 0:
        out["persistent_workers"] = False
        out["prefetch_factor"] = None
    return out


def fix_code(settings: Mapping[str, Any]) -> str:
    """The permanent code change for injected settings: ``DataLoader(..., num_workers=4, ...)``."""
    order = ["num_workers", "pin_memory", "persistent_workers", "prefetch_factor"]
    names = [n for n in order if n in settings] + [n for n in settings if n not in order]
    args = ", ".join(f"{n}={settings[n]!r}" for n in names)
    return f"DataLoader(..., {args})" if args else ""


def predicted_step_ms(
    model_alone_step_ms: float,
    loader_batches_per_s: float,
    num_workers: int,
    batches_per_step: float = 1.0,
) -> float:
    """Step time predicted from the model-alone step and a loader-alone throughput.

    Without workers the batch is made in the training process, between steps: the times add.
    With workers it is made in parallel: the slower of the two bounds the step. (On a CPU
    model the workers also take cores from it, which this does not see: measure whole steps.)
    """
    if loader_batches_per_s <= 0:
        return math.inf
    loading_ms = 1000.0 * batches_per_step / loader_batches_per_s
    if num_workers == 0:
        return model_alone_step_ms + loading_ms
    return max(model_alone_step_ms, loading_ms)


__all__ = [
    "fix_code",
    "fix_settings",
    "predicted_step_ms",
    "SweepPoint",
    "SweepPolicy",
    "WorkerSweep",
    "max_sweep_workers",
    "pick_workers",
    "sweep_advice",
    "sweep_candidates",
]
