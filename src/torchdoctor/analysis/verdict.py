"""What bounds a run: the verdict from measured step parts and counterfactuals (pure)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..record import (
    COMPUTE_BOUND,
    ENDED_SHORT,
    HOST_BOUND,
    INPUT_BOUND,
    OUT_OF_MEMORY,
    SCRIPT_ERROR,
    STEP_PARTS,
    UNKNOWN,
    LoaderSettings,
    RunRecord,
    Stat,
    Verdict,
)
from ..record.part_names import OPTIONAL_PARTS, PART_GROUPS
from .compute_advice import CEILING_NO_GAIN, next_compute, pct, why_compute
from .firmness import BUSY_CORES, firm, others_cores
from .short_run import MIN_VERDICT_STEPS, fit_first, oom_next, too_few

#: Share of step time spent waiting for batches (and copying them) that makes a run input-bound.
#: A quarter of the step is where fixing the input pays at least 1.33x.
INPUT_BOUND_SHARE = 0.25
#: A run whose step with data made free is this much faster is input-bound even when the loop
#: barely waits: the loader's workers slow the model down by competing for the same cores.
INPUT_BOUND_CEILING = 1.3
#: Without workers the loader runs in the loop, so its cost shows in the wait; there the ceiling
#: decides only where the wait is this share of the step or more (a ceiling over a loop that
#: barely waits is run-to-run noise of two phases, not input cost).
INPUT_CEILING_MIN_SHARE = 0.125
#: Share of step time outside the loader, the model, backward and the optimizer (Python work,
#: logging, host syncs between the calls) that makes a run host-bound.
HOST_BOUND_SHARE = 0.30

#: Which step parts make up each group of the verdict (from record.part_names.PART_GROUPS).
GROUPS = {
    group: tuple(part for part in STEP_PARTS if PART_GROUPS[part] == group)
    for group in ("input", "compute", "host")
}


@dataclass(frozen=True)
class Derived:
    """What a record's measured series give: its statistics, the ceiling and the verdict."""

    step_ms: Stat | None
    parts_ms: dict[str, Stat]
    model_alone_step_ms: Stat | None
    ceiling_speedup: float | None
    ceiling_interval: list[float]
    #: Batches per second the loader alone must deliver to keep up with the model, if measured.
    needed_batches_per_s: float | None
    verdict: Verdict


def derive(record: RunRecord) -> Derived:
    """The record's derived figures, from its per-step series and counterfactuals (pure: the
    record is read, never changed)."""
    steps = record.steps
    step_ms = Stat.of(steps.step_ms)
    model_alone = Stat.of(record.model_alone)
    ceiling, ceiling_interval = None, []
    # Ratios of mean step times: they are ratios of throughput. With DataLoader workers batches
    # arrive in rounds (several at once, then a wait), and a median step misses the waits.
    if step_ms and model_alone and model_alone.mean > 0:
        ceiling = round(step_ms.mean / model_alone.mean, 3)
        if len(steps.step_ms) >= 2 and len(record.model_alone) >= 2:
            ceiling_interval = _bracketed(record)
    needed = None
    loader_alone = record.loader_alone
    if loader_alone and model_alone and model_alone.mean:
        per_step = _mean(steps.batches) or 1.0
        needed = round(per_step * 1000.0 / model_alone.mean, 3)
        loader_alone = replace(loader_alone, needed_batches_per_s=needed)
    parts = {
        name: s
        for name in STEP_PARTS
        if (s := Stat.of(steps.part(name))) and (s.max > 0 or name not in OPTIONAL_PARTS)
    }
    # the verdict reads the figures above: it decides on a copy that holds them
    view = replace(
        record,
        step_ms=step_ms,
        parts_ms=parts,
        model_alone_step_ms=model_alone,
        ceiling_speedup=ceiling,
        ceiling_interval=ceiling_interval,
        loader_alone=loader_alone,
    )
    verdict = decide(view)
    busy = busy_words(view)
    if verdict.kind != UNKNOWN:
        if busy:
            verdict.why += f"; {busy}"
        verdict = firm(view, verdict, decide, busy)  # it stands on a quiet machine
    verdict = fit_first(record, verdict)
    return Derived(step_ms, parts, model_alone, ceiling, ceiling_interval, needed, verdict)


def _bracketed(record: RunRecord) -> list[float]:
    """The ceiling's 90% interval, spanning both brackets of the model-alone steps: the
    measured steps before them and the script's steps right after them (when taken). Load
    that came or went between the brackets widens it, so the verdict, which reads its low end,
    does not take a ceiling the load made for the script's."""
    from .compare import interval

    alone = list(record.model_alone)
    lo, hi = interval(list(record.steps.step_ms), alone, rounds=500)
    if len(record.measured_after) >= 2:
        after_lo, after_hi = interval(list(record.measured_after), alone, rounds=500)
        lo, hi = min(lo, after_lo), max(hi, after_hi)
    return [round(lo, 3), round(hi, 3)]


def summarise(record: RunRecord) -> None:
    """Write what :func:`derive` finds into the record: the one writer of its derived fields,
    run wherever its measured series are set (built, rebuilt from a stream, a job combined)."""
    derived = derive(record)
    record.step_ms = derived.step_ms
    record.parts_ms = derived.parts_ms
    record.model_alone_step_ms = derived.model_alone_step_ms
    record.ceiling_speedup = derived.ceiling_speedup
    record.ceiling_interval = derived.ceiling_interval
    if record.loader_alone is not None and derived.needed_batches_per_s is not None:
        record.loader_alone.needed_batches_per_s = derived.needed_batches_per_s
    record.verdict = derived.verdict


def busy_words(record: RunRecord) -> str:
    """Words for a machine other processes kept busy during the measurement, or ``""``."""
    others = others_cores(record)
    if others is None or others < BUSY_CORES:
        return ""
    cores = record.env.cpu_logical if record.env is not None and record.env.cpu_logical else None
    of = f" of its {cores} cores" if cores else ""
    return (
        f"the machine was busy: other processes took {others:.1f}{of} while the steps were "
        "measured, so these figures may be slower and noisier than on a quiet machine"
    )


def group_shares(record: RunRecord) -> dict[str, float]:
    """Share of all measured step time spent in each group (sums to 1)."""
    total = sum(record.steps.step_ms)
    if total <= 0:
        return {}
    return {
        group: round(sum(sum(record.steps.part(p)) for p in parts) / total, 4)
        for group, parts in GROUPS.items()
    }


def decide(record: RunRecord) -> Verdict:
    """The verdict, with why (the measured shares) and what to try next."""
    if not record.steps.step_ms or record.step_ms is None:
        return _no_step(record)
    if len(record.steps.step_ms) < MIN_VERDICT_STEPS and record.status in ENDED_SHORT:
        return too_few(record, shares=group_shares(record))
    shares = group_shares(record)
    step = record.step_ms.mean
    ceiling = record.ceiling_speedup
    input_share, host_share = shares["input"], shares["host"]
    has_loader = record.loader is not None and record.seen.get("batches", 0) > 0
    has_input = has_loader or bool(record.built_inputs)

    # A measured ceiling decides with or without workers: with workers the loader's cost can hide
    # beside the model (they compete for the cores), without them it can sit outside the wait
    # (the model's step runs slower after the loader's work).
    workers = record.loader is not None and record.loader.num_workers > 0
    # Beyond noise: the interval's low end where there is one (a 1.4x from steps that scatter
    # by half is no evidence).
    sure_ceiling = record.ceiling_interval[0] if record.ceiling_interval else ceiling
    ceiling_says_input = (
        sure_ceiling is not None
        and sure_ceiling >= INPUT_BOUND_CEILING
        and (workers or input_share >= INPUT_CEILING_MIN_SHARE)
    )
    input_bound = has_input and (input_share >= INPUT_BOUND_SHARE or ceiling_says_input)
    host_bound = host_share >= HOST_BOUND_SHARE
    if input_bound and host_bound:
        input_bound = input_share >= host_share or ceiling_says_input
        host_bound = not input_bound
    if not input_bound and not host_bound:
        # No bound is named for a group whose share does not lead: the group that does decides.
        leader = max(shares, key=lambda group: shares[group])
        if leader == "input" and input_share > 0:
            input_bound = True
        elif leader == "host":
            host_bound = True
    if input_bound:
        why = _why_input(record, shares, step)
        return Verdict(INPUT_BOUND, why, _then_trials(record, _next_input(record)), shares)
    if host_bound:
        why = _why_host(record, shares, step, has_loader)
        return Verdict(HOST_BOUND, why, _with_trials(record, _NEXT_HOST), shares)
    why = why_compute(record, shares, step)
    return Verdict(COMPUTE_BOUND, why, _with_trials(record, next_compute(record)), shares)


def _no_step(record: RunRecord) -> Verdict:
    whole = record.whole_run
    if whole is not None and whole.steps:  # run --whole, a run too short for its window
        return Verdict(
            kind=UNKNOWN,
            why=f"the run took {whole.steps} step(s), all of them in --warmup: none was "
            "measured part by part",
            next="read the whole run's accounts above; for the steps' verdict, lower --warmup",
        )
    if record.status == OUT_OF_MEMORY:
        stepped = record.seen.get("optimizer_steps") or record.seen.get("backward_calls") or 0
        return Verdict(
            kind=UNKNOWN,
            why="the script ran out of memory before a training step was measured"
            + (f" ({stepped} step(s) of the warm-up fitted)" if stepped else ""),
            next=oom_next(record),
        )
    if record.status == SCRIPT_ERROR:
        return Verdict(
            kind=UNKNOWN,
            why="the script failed before a training step was measured",
            next="fix the script's error (its traceback is above, and in the notes) and run "
            "torchdoctor again",
        )
    started = record.seen.get("processes_started", 0)
    if started and not record.seen.get("optimizer_steps") and not record.seen.get("backward_calls"):
        return Verdict(
            kind=UNKNOWN,
            why=f"the script's own process did not train: it started {started} process(es) of "
            "its own (torch.multiprocessing or multiprocessing), which is where it trains, and "
            "torchdoctor measures only the process it runs",
            next="to diagnose the training, run its loop in the script's own process once (one "
            "process instead of several, e.g. a --num-processes 1 option calling the training "
            "function directly), then torchdoctor run on that",
        )
    return Verdict(
        kind=UNKNOWN,
        why="no training step was measured",
        next="check that the script reaches optimizer.step(), or loss.backward() in a loop "
        "that updates its parameters itself (see what torchdoctor saw)",
    )


def _then_trials(record: RunRecord, advice: str) -> str:
    """An input-bound run's advice, then the trials the user asked for (when measured)."""
    from .trials import next_with_trials

    measured = next_with_trials(record)
    return f"{advice}; {measured}" if measured is not None else advice


def _with_trials(record: RunRecord, advice: str) -> str:
    """The trials measured, best first, before the advice; or how to measure them."""
    from .trials import next_with_trials

    measured = next_with_trials(record)
    if measured is not None:
        return f"{measured}; {advice}"
    return f"{advice}; measure them in your own loop: torchdoctor run --try all"


def _why_input(record: RunRecord, shares: dict[str, float], step: float) -> str:
    wait = _mean_part(record, "data_wait")
    if record.loader is None and record.built_inputs:
        waits = f"spends {wait:.1f} ms building its batches ({', '.join(record.built_inputs)})"
    else:
        waits = f"waits {wait:.1f} ms for data"
    parts = [
        f"the loop {waits} in a mean {step:.1f} ms step ({pct(shares['input'])} of step time in input)"
    ]
    if record.ceiling_speedup is not None and record.model_alone_step_ms:
        parts.append(
            f"with data made free the step takes {record.model_alone_step_ms.mean:.1f} ms, "
            f"a ceiling of {record.ceiling_speedup:.2f}x from fixing the input"
        )
        if shares["input"] < INPUT_BOUND_SHARE:
            workers = record.loader is not None and record.loader.num_workers > 0
            parts.append(
                "the loop seldom waits, yet the model runs slower while the loader works: "
                "its workers compete with the model for CPU"
                if workers
                else "the input costs more than the wait shows: the rest of the step runs "
                "slower after the loader's work in the loop"
            )
    la = record.loader_alone
    if la is not None and la.needed_batches_per_s:
        parts.append(
            f"alone, the loader delivers {la.batches_per_s:.1f} batches/s; "
            f"the model consumes {la.needed_batches_per_s:.1f}"
        )
    return "; ".join(parts)


def _next_input(record: RunRecord) -> str:
    loader: LoaderSettings | None = record.loader
    if loader is None and record.built_inputs:
        return _next_built_input(record)
    tips = []
    measured = next(
        (f for f in record.findings if f.kind in ("loader.num_workers", "loader.num_threads")),
        None,
    )
    sweep = record.loader_report.worker_sweep if record.loader_report else None
    if measured is not None:
        code = " and ".join(line.split("  #")[0] for line in measured.fix.splitlines())
        tips.append(f"{code} (measured: {measured.title})")
    elif sweep is not None and sweep.points:
        threads = " (nor fewer torch threads)" if sweep.default_threads is not None else ""
        tips.append(
            f"more DataLoader workers{threads} do not pay here (the num_workers sweep measured no "
            "worthwhile gain: the loader and the model share the CPU cores), so make each "
            "sample cheaper"
        )
    elif loader is not None and loader.num_workers == 0:
        tips.append("load in parallel: DataLoader(num_workers=N) (it is 0)")
    costly = next((f for f in record.findings if f.kind == "loader.costly_transform"), None)
    library = costly is not None and costly.detail.get("kind") == "library"
    if costly is not None:
        tips.append(
            f"{costly.title}: library code your __getitem__ calls per sample (see the finding)"
            if library
            else costly.title
        )
    if not library:
        tips.append(
            "do the deterministic work (decode, resize) once offline: `torchdoctor cache build`, "
            "then read it with torchdoctor.CachedDataset"
        )
    tips.append("keep samples uint8 and normalise on the device (torchdoctor.Normalize)")
    if record.env is not None and record.env.device != "cpu" and loader and not loader.pin_memory:
        tips.append("pin_memory=True with a DevicePrefetcher so copies overlap compute")
    return "; ".join(tips)


def _next_built_input(record: RunRecord) -> str:
    """Advice for a loop that builds its batches itself (no DataLoader)."""
    tips = [
        "build the batches beside the model instead of between its steps: a Dataset whose "
        "__getitem__ returns one sample, read by a DataLoader(num_workers=N, pin_memory=True)",
        "read the data from a numpy memmap (np.memmap) of the prepared file, not from Python "
        "objects or a file opened and decoded per batch",
    ]
    if record.env is not None and record.env.device != "cpu":
        tips.append(
            "copy from pinned memory without blocking: x.pin_memory().to(device, "
            "non_blocking=True), and fetch the next batch right after the forward pass"
        )
    return "; ".join(tips)


def _why_host(record: RunRecord, shares: dict[str, float], step: float, has_loader: bool) -> str:
    other = _mean_part(record, "other")
    where = (
        "outside the loader, the model, backward and the optimizer"
        if has_loader
        else "outside the model, backward and the optimizer; the loop builds its batches itself, "
        "so this includes making them"
    )
    return (
        f"{other:.1f} ms of a mean {step:.1f} ms step ({pct(shares['host'])} of step time) "
        f"is spent {where}: Python work, logging and host syncs between the calls"
    )


_NEXT_HOST = (
    "look at the findings for host syncs (.item(), printing tensors) and per-step copies; log "
    "every k steps and accumulate metrics on the device; move per-step Python work out of the loop"
)


def ceiling_words(record: RunRecord) -> str:
    """The ceiling in words, the same in the terminal and on the page: never "0.71x faster",
    with its interval, and flagged when the input's share cannot explain it."""
    ceiling = record.ceiling_speedup
    if ceiling is None:
        return ""
    if ceiling < CEILING_NO_GAIN:
        return (
            f"no gain from faster data: with data made free the step is no faster ({ceiling:.2f}x)"
        )
    spread = record.ceiling_interval
    text = f"{ceiling:.2f}x faster if data cost nothing"
    if spread:
        text = f"{ceiling:.2f}x [{spread[0]:.2f}-{spread[1]:.2f}] faster if data cost nothing"
    verdict = record.verdict.kind if record.verdict is not None else ""
    input_share = record.verdict.shares.get("input", 0.0) if record.verdict is not None else 0.0
    workers = record.loader is not None and record.loader.num_workers > 0
    if verdict != INPUT_BOUND and ceiling >= INPUT_BOUND_CEILING and not workers:
        text += (
            f" (more than the input's {pct(input_share)} of the step explains: the data-free "
            "steps ran under less load, noise)"
        )
    return text


#: torchdoctor's own cost is said beside the figures once it is this share of the step.
CAPTURE_COST_SHOWN = 0.01


def capture_cost_words(record: RunRecord) -> str:
    """What torchdoctor's hooks cost each measured step, where it matters (1% of the step or
    more); empty otherwise. The same words in the terminal and on the page."""
    cost = record.overhead_ms.get("capture_per_step_ms")
    step = record.step_ms.mean if record.step_ms is not None else 0.0
    if not cost or step <= 0 or cost < CAPTURE_COST_SHOWN * step:
        return ""
    return (
        f"torchdoctor's hooks took {cost * 1000:.0f} us of CPU time in each measured step "
        f"({pct(cost / step)} "
        "of it), included in the step times"
    )


def _mean_part(record: RunRecord, part: str) -> float:
    stat = record.parts_ms.get(part)
    return stat.mean if stat else 0.0


def _mean(values: list[int] | list[float]) -> float | None:
    return sum(values) / len(values) if values else None
