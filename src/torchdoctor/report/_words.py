"""What the terminal report, the page and its charts say alike, written once.

The page used to import these from the terminal renderer (a rich module) or to write its own
copy that had drifted (its environment table lacked the cores' physical count, the CPU shares and
the memory). Each renderer now takes the words from here and only lays them out: a table row in
the terminal, a ``<tr>`` or a chart's legend on the page. Plain strings, no rich, no HTML.

Not here yet: how a run ended (``terminal.stop_line``, ``terminal.ending_words``, being rewritten
with the endings), the trials' lines (``report/trials.py``, with the judged speedup), and the
paired words of a section drawn in both places (``whole_run``, ``patch``), which their page
modules take from their terminal modules.
"""

from __future__ import annotations

from ..analysis.verdict import capture_cost_words
from ..record import (
    BATCH_SIZE_ARGUMENT,
    BATCH_SIZE_MEASURED,
    MIN_CPU_WINDOW_S,
    STRAGGLER,
    WAITS,
    DistributedReport,
    LoaderSettings,
    MemorySplit,
    RankRun,
    RunRecord,
    SystemUsage,
    ThreadWaits,
    TraceReport,
    Verdict,
)
from ..record.part_names import PART_HEADERS, PART_LABELS

#: The counterfactual rows: the step as the script runs it, then with a cost made free.
AS_RUN = "step, as the script runs"
MODEL_ALONE = "data made free (model alone)"
NO_SYNC = "communication made free (no-sync)"

#: Each part of a profiler trace's step (``analyze``) as a table row names it.
TRACE_PART_LABELS = {
    "gpu_kernels": "GPU kernels",
    "memcpy": "memcpy",
    "memset": "memset",
    "communication": "communication",
    "runtime": "CUDA/HIP runtime",
    "dataloader": "DataLoader",
    "cpu_ops": "CPU ops",
    "other": "other (Python, idle)",
}


def command_words(record: RunRecord) -> str:
    """The record's command line, without a leading ``torchdoctor`` (the heading says it)."""
    words = list(record.command)
    if words and words[0] == "torchdoctor":
        words = words[1:]
    return " ".join(words)


def trace_headline(record: RunRecord) -> str:
    """What an ``analyze`` record is, in one line: its files, ranks and steps."""
    trace = record.trace or TraceReport()
    head = f"{len(trace.files)} trace file(s), {', '.join(r.label for r in trace.ranks)}"
    if record.step_ms:
        count = record.step_ms.count
        head += f"; median step {record.step_ms.median:.1f} ms over {count} step" + (
            "" if count == 1 else "s"
        )
    return head


def ms_text(x: float) -> str:
    """A duration in ms with the precision its size deserves (two decimals under 100 ms)."""
    return f"{x:,.2f}" if x < 100 else f"{x:,.1f}"


def part_label(part: str) -> str:
    """A step part's (or a trace part's) name in a table row; an unknown one as it is."""
    return PART_LABELS.get(part) or TRACE_PART_LABELS.get(part) or part.replace("_", " ")


def part_header(part: str) -> str:
    """A step part's name over a narrow column, on one line (the terminal breaks it in two)."""
    return " ".join(PART_HEADERS.get(part, part).split())


def legend_label(part: str, most_chars: int) -> str:
    """A part's name in a chart's legend, which has room for ``most_chars``: its row label
    without the parenthesis, or its bare name when even that is longer."""
    label = part_label(part).split(" (")[0]
    return label if len(label) <= most_chars else part.replace("_", " ")


def share_words(verdict: Verdict) -> list[str]:
    """Each group's share of the step, as the verdict counts it (``input 40%``)."""
    return [f"{group} {share * 100:.0f}%" for group, share in verdict.shares.items()]


def firm_words(verdict: Verdict) -> str:
    """``not firm: ...`` for a verdict the load could have flipped; ``""`` for a firm one."""
    if verdict.firm:
        return ""
    others = [k for k in verdict.candidates if k != verdict.kind]
    could = f"; it could also be {' or '.join(others)}" if others else ""
    return f"not firm: the load on this machine could have decided it{could} (see Why)"


def environment_rows(record: RunRecord) -> list[tuple[str, str]]:
    """Where the run happened, as (name, words) rows: versions, device, clock, the capture's
    cost, cores, ranks, the DataLoader, CPU, memory and GPU use. Empty without an environment."""
    env = record.env
    if env is None:
        return []
    rows = [
        ("torch", f"{env.torch_version} (Python {env.python_version})"),
        ("device", f"{env.device} — {env.device_name}"),
        ("clock", env.clock),
    ]
    if capture_cost_words(record):
        rows.append(("capture", capture_cost_words(record)))
    rows.append(
        (
            "cores",
            f"{env.cpu_logical} logical, {env.cpu_physical or '?'} physical; "
            f"torch threads {env.torch_threads}",
        )
    )
    if env.world_size > 1:
        rows.append(("distributed", f"rank {env.rank} of {env.world_size}"))
    loader = record.loader
    if loader is not None:
        rows.append(
            (
                "loader",
                f"{loader.dataset} (len {loader.dataset_len}), {batch_size_words(loader)}, "
                f"num_workers={loader.num_workers}, pin_memory={loader.pin_memory}, "
                f"persistent_workers={loader.persistent_workers}, "
                f"prefetch_factor={loader.prefetch_factor}",
            )
        )
    usage = record.system
    if usage is not None:
        rows.append(("cpu", cpu_words(usage)))
        if usage.waits is not None:
            rows.append(("threads", threads_words(usage.waits)))
        rows.append(
            (
                "memory",
                f"main process RSS {usage.main_rss_mb_max:.0f} MiB; "
                f"{usage.workers} worker process(es) RSS {usage.workers_rss_mb_max:.0f} MiB",
            )
        )
        if record.memory_split is not None:
            rows.append(("step memory", memory_words(record.memory_split)))
        if usage.gpu_util_pct is not None:
            rows.append(
                (
                    "gpu",
                    f"utilisation {usage.gpu_util_pct:.0f}%, memory {usage.gpu_mem_mb_max:.0f} MB",
                )
            )
    return rows


def cpu_words(usage: SystemUsage) -> str:
    """The CPU shares of the measured steps, or why none is told."""
    others = ""
    if usage.others_cpu_cores is not None:
        others = f"other processes took {usage.others_cpu_cores:.1f} cores"
    if not usage.cpu_percent_per_core:
        told = (
            f"; {others} over {usage.others_window_s:.1f} s of the run around them"
            if others and usage.others_window_s is not None
            else ""
        )
        return (
            f"not told per core: the measured steps took under {MIN_CPU_WINDOW_S:g} s, too "
            f"short for the system's CPU counters{told}"
        )
    cores = " ".join(f"{c:.0f}%" for c in usage.cpu_percent_per_core)
    return f"per core {cores} (mean over {usage.samples} samples)" + (
        f"; {others}" if others else ""
    )


def threads_words(waits: ThreadWaits) -> str:
    """The script's threads' work and waiting for a core over the measured steps."""
    return (
        f"over {waits.window_s:.2f} s of steps the training thread worked {waits.training_cpu_s:.2f} "
        f"s and waited {waits.training_waited_s:.2f} s for a core; all the script's threads "
        f"(torch's, the workers') {waits.threads_cpu_s:.2f} s and {waits.threads_waited_s:.2f} s"
    )


def batch_size_words(loader: LoaderSettings) -> str:
    """``batch_size=8``, with where it was read when not the DataLoader's own argument."""
    text = f"batch_size={loader.batch_size}"
    source = loader.batch_size_source
    if source == BATCH_SIZE_MEASURED:
        return f"{text} (measured: the batches' leading dimension)"
    if source is not None and source != BATCH_SIZE_ARGUMENT:
        return f"{text} (from {source})"
    return text


def rank_label(r: RankRun, job: DistributedReport) -> str:
    """``0``, or on many nodes ``0 node-a:0`` (the machine's short name, the local rank)."""
    if job.nnodes > 1:
        host = r.host.split(".", 1)[0] or "?"  # the machine's short name
        return f"{r.rank} {host}:{r.local_rank}"
    return str(r.rank)


def role_words(r: RankRun, job: DistributedReport) -> str:
    """A rank's role in a job (``straggler``, ``waits for rank 1``)."""
    if r.role == STRAGGLER:
        return "straggler"
    if r.role == WAITS:
        waited = [s.rank for s in job.stragglers if r.rank in s.victims]
        return f"waits for rank {', '.join(str(w) for w in waited)}" if waited else "waits"
    return r.role


def waiting_words(r: RankRun) -> str:
    """`` (waiting in a collective)`` for a rank that was when stopped, else nothing."""
    return " (waiting in a collective)" if r.in_collective else ""


def projection_lines(job: DistributedReport) -> list[str]:
    """The job's step projected to more ranks, with the link and what the model assumes."""
    p = job.projection
    if p is None:
        return []
    scales = "; ".join(
        f"{s.ranks} ranks: step {s.step_ms:.1f} ms, {s.comm_share:.0%} communication"
        for s in p.scales
    )
    return [
        f"projected to more ranks on {p.link} (change it: torchdoctor report RUN.json --link): "
        f"{scales}",
        f"  modelled per step: {', '.join(p.collectives)}; assumed: {'; '.join(p.assumptions)}",
    ]


def memory_words(split: MemorySplit) -> str:
    """One untimed step's memory by kind, the blocks with the most activations, and the device's
    peak with its temporaries (or that the CPU tells no peak)."""
    size = byte_size
    text = (
        f"parameters {size(split.parameters)}, gradients {size(split.gradients)}, optimizer "
        f"state {size(split.optimizer_state)}, activations saved for backward "
        f"{size(split.activations)}"
    )
    if split.largest and split.activations:
        top = split.largest[:3]
        named = ", ".join(
            f"{m.module}"
            + (f" ({m.type}{', ' + m.defined_at if m.defined_at else ''})" if m.type else "")
            + f" {m.nbytes / split.activations:.0%}"
            for m in top
        )
        text += f": most in {named}"
    if split.peak is not None:
        text += (
            f"; peak {size(split.peak)} on {split.device} during the step, "
            f"{size(split.temporaries or 0)} of it temporaries"
        )
    else:
        text += f"; on {split.device} no allocator peak is read (an accelerator's is)"
    return text


def byte_size(nbytes: int) -> str:
    """``18063364`` as ``17.2 MiB``; under 0.1 MiB in KiB (binary units, as the out-of-memory
    ending writes them)."""
    mb = 1024 * 1024
    if nbytes <= 0:
        return "none"  # plain SGD's optimizer state
    return f"{nbytes / mb:.1f} MiB" if nbytes >= mb / 10 else f"{nbytes / 1024:.1f} KiB"
