"""DataLoader settings to change, from a measured worker sweep: each a finding with the code.

Pure: nothing here imports torch. The arguments a finding advises stay valid as a whole by
:func:`~torchdoctor.loader.valid_loader_kwargs` (going to 0 workers resets the worker-only
ones).
"""

from __future__ import annotations

from ..record import Finding, LoaderSettings, SweepPoint, WorkerSweep
from ._rules import DEFAULT_PREFETCH_FACTOR, WORKER_ONLY, valid_loader_kwargs

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
        bytes_per_batch: size of one batch (see :func:`~torchdoctor.loader.loader_memory`).
        available_ram_bytes: free RAM now, to keep the advised queues within it.

    Returns:
        Findings of kind ``loader.num_workers`` (naming ``torch.set_num_threads`` too when the
        sweep's pick changes the main process's threads) or ``loader.num_threads`` (only the
        threads change), ``loader.pin_memory``, ``loader.persistent_workers`` and
        ``loader.prefetch_factor``, as warranted.
    """
    findings: list[Finding] = []
    chosen = sweep.best_workers
    threads = sweep.threads_change
    best = sweep.best
    current = settings.num_workers
    speedup = sweep.speedup_over(current)
    what = "training steps" if sweep.measures == "step" else "batches from the loader alone"
    worthwhile = speedup is None or speedup >= MIN_WORTHWHILE_SPEEDUP
    if not (worthwhile and (chosen != current or threads is not None)):
        # A gain inside the noise is no reason to change: the rest of the advice is for the
        # worker count the loader keeps.
        chosen, threads = current, None
        best = sweep.point(current) or best
    else:
        findings.append(_setting_finding(sweep, settings, chosen, threads, speedup, what))
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


def _setting_finding(
    sweep: WorkerSweep,
    settings: LoaderSettings,
    chosen: int,
    threads: int | None,
    speedup: float | None,
    what: str,
) -> Finding:
    """The sweep's pick as one finding: ``loader.num_workers`` (with the threads, when they
    change too) or, when only the threads change, ``loader.num_threads``."""
    current = settings.num_workers
    gain = f"{speedup:.2f}x the {what} per second" if speedup else "the best measured rate"
    set_threads = f"torch.set_num_threads({threads})" if threads is not None else ""
    fixes = []
    if chosen != current:
        fixes.append(f"DataLoader(..., num_workers={chosen}{_worker_kwargs_for(chosen, settings)})")
        title = f"num_workers={current} -> {chosen}"
        if threads is not None:
            title += f" and {set_threads} at the start"
    else:
        title = f"{set_threads} at the start, with num_workers={current}"
    if threads is not None:
        fixes.append(f"{set_threads}  # at the start of the script")
    detail = {
        "current": current,
        "recommended": chosen if chosen != current else threads,
        "predicted_speedup": speedup,
        "measures": sweep.measures,
        "curve": [[p.num_workers, round(p.batches_per_s, 3)] for p in _default_threads(sweep)],
        "stopped": sweep.stopped,
        "best_batches_per_s": sweep.best.batches_per_s,
    }
    if sweep.default_threads is not None:
        detail["threads"] = threads
        detail["default_threads"] = sweep.default_threads
        detail["trials"] = [
            [p.num_workers, p.threads, round(p.batches_per_s, 3)] for p in sweep.points
        ]
    return Finding(
        kind="loader.num_workers" if chosen != current else "loader.num_threads",
        title=f"{title}: {gain}",
        fix="\n".join(fixes),
        severity="warning" if speedup is None or speedup >= 1.5 else "info",
        detail=detail,
    )


def _default_threads(sweep: WorkerSweep) -> list[SweepPoint]:
    """The points measured with the script's own thread count (all of a workers-only sweep)."""
    return [p for p in sweep.points if p.threads in (None, sweep.default_threads)]


def _worker_kwargs_for(chosen: int, settings: LoaderSettings) -> str:
    """Arguments that must change with ``num_workers`` for the DataLoader to accept it."""
    if chosen == 0 and (settings.persistent_workers or settings.prefetch_factor):
        # DataLoader raises for these with num_workers=0.
        valid = valid_loader_kwargs({"num_workers": 0})
        return "".join(f", {name}={valid[name]!r}" for name in WORKER_ONLY)
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
    factor = settings.prefetch_factor or DEFAULT_PREFETCH_FACTOR
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


__all__ = [
    "JITTERY_PREFETCH_FACTOR",
    "JITTER_RATIO",
    "MIN_WORTHWHILE_SPEEDUP",
    "PERSISTENT_WORKERS_STARTUP_SHARE",
    "PREFETCH_RAM_SHARE",
    "SHORT_EPOCH_BATCHES",
    "sweep_advice",
]
