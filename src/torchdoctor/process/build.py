"""The run record from a capture session: what was measured, how the script ended, the verdict."""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace

from .. import __version__
from .._errors import TorchdoctorError
from ..analysis.memory_course import add_creep
from ..analysis.verdict import summarise
from ..capture import (
    CaptureSession,
    detect_environment,
    evaluation_finding,
    held_by_category,
    innermost_user_line,
    manual_collectives_finding,
)
from ..record import COMPLETE, PARTIAL, RunRecord, TraceReport
from .ending import (
    CTRL_C,
    OutOfMemory,
    ScriptEnd,
    batch_that_fits,
    decide_script,
    host_capacity,
    out_of_memory,
    settle,
    too_large,
)


def build_record(
    session: CaptureSession,
    command: list[str],
    ended: str,
    error: BaseException | None = None,
    snapshot: bool = False,
) -> RunRecord:
    """The run record from a finished capture session.

    With ``snapshot``, the record so far of a session still running: no trace analysis, and the
    status stays ``partial`` until the supervisor learns how the run ended.
    """
    opts = session.options
    record = RunRecord(
        tool_version=__version__,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=command,
        env=detect_environment(session),
        loader=session.loaders.main_settings(),
        warmup_steps=opts.warmup,
        requested_steps=opts.steps,
        steps=session.measured_series(),
        model_alone=session.model_alone_step_ms(),
        loader_alone=session.data.loader_alone,
        system=session.data.system,
        seen=dict(session.data.seen),
        notes=list(session.data.notes),
    )
    record.loader_overrides = dict(opts.loader_overrides)
    record.step_boundary = session.boundary.kind or "optimizer"
    record.step_boundary_evidence = session.boundary.evidence
    if record.step_boundary == "backward":
        record.backwards_per_step = session.boundary.backwards_per_step
    record.built_inputs = session.inputs.described()
    record.losses = list(session.data.losses)
    record.joined_at = session.ranks.ran_out_at
    if session.state.autocast_dtype:  # what the script does already: no advice repeats it
        record.seen["autocast_dtype"] = session.state.autocast_dtype
    if session.ranks.peer_stopped:
        record.notes.append(
            "stopped: another rank was about to save a checkpoint while the replicas had "
            "drifted apart in the communication-free phase (nothing was saved)"
        )
    record.threads_override = opts.threads_override
    # each no-sync step less its own collectives that ran for real (an all-gather it reads)
    # (the phase appends a step and its collectives' ms together)
    record.no_sync = [
        round(max(session.step_ms(step) - taken, 0.0), 4)
        for step, taken in zip(session.data.no_sync, session.data.no_sync_collectives_ms)
    ]
    record.measured_after = [round(session.step_ms(s), 4) for s in session.data.measured_after]
    _attach_trials(record, session)
    # Noted after the measured steps; a snapshot before then (a job that fails early) reads the
    # process group's backend and the DDP settings as they are now.
    record.seen.update(
        session.data.ddp_settings or session.parallel.ddp_settings(session.root_modules())
    )
    if session.ranks.backend and not record.seen.get("backend"):
        record.seen["backend"] = session.ranks.backend  # the script destroyed its group since
    watch = session.parallel.collectives
    record.collectives = list(watch.step_ms) if watch.measured_calls else []
    record.torch_collectives = list(watch.issued.step_ms)
    record.torch_collective_kinds = watch.issued.per_step()
    manual = manual_collectives_finding(session.parallel.collectives, record)
    if manual is not None:
        record.findings.append(manual)
    record.findings.extend(session.data.parallel_findings)
    record.findings.extend(session.data.loop_findings)
    evaluation = evaluation_finding(record, session.data.evaluations)
    if evaluation is not None:
        record.findings.append(evaluation)
    record.findings.extend(session.data.sync_findings)
    record.findings.extend(session.data.memory_findings)
    record.overhead_ms.update(session.data.overheads_ms())
    record.sync_sampled_steps = len(session.data.sync_sample_ms)
    record.memory_split = session.data.memory_split
    record.memory_course = session.data.memory_course
    add_creep(record)  # after the kept-graph findings: it names their line
    _memory_before_syncs(record, session.data.sync_findings)
    if session.data.loader_diagnosis is not None:
        record.loader_report = session.data.loader_diagnosis.report
        record.findings.extend(session.data.loader_diagnosis.findings)
    if snapshot:
        record.status = PARTIAL
        summarise(record)
        return record
    if session.whole is not None:
        from ..analysis.whole_run import attach_whole

        # a crash ends the run as the script does: only a stop from outside cuts it short
        attach_whole(record, session.whole.summary(), cut=ended == CTRL_C)
    if session.data.trace_paths:
        _attach_trace(record, session.data.trace_paths)
    ending = decide_script(script_end(session, record, ended, error))
    whole = record.whole_run
    if ending.status == COMPLETE and whole is not None and whole.steps and not record.steps:
        record.notes.append(
            f"the run took {whole.steps} step(s), no more than --warmup ({opts.warmup}): none "
            "was measured part by part for the verdict (lower --warmup to have some)"
        )
    settle(record, ending)  # the status first, then the verdict that reads it
    return record


def script_end(
    session: CaptureSession, record: RunRecord, ended: str, error: BaseException | None
) -> ScriptEnd:
    """The evidence of how the script ended in this process, for :func:`decide_script`."""
    internal = session.data.internal_error
    return ScriptEnd(
        ended=ended,
        measured_steps=record.measured_steps,
        seen=dict(session.data.seen),
        warmup=session.options.warmup,
        steps=session.options.steps,
        phase=session.phase_name,
        error=type(error).__name__ if error is not None else "",
        out_of_memory=_out_of_memory(session, error),
        internal_error=f"{type(internal).__name__}: {internal}" if internal is not None else "",
        peer_lost=str(session.ranks.peer_lost or ""),
        uneven_join=session.ranks.uneven_join,
        whole_steps=session.whole.steps if session.whole is not None else None,
        model_alone_steps=len(record.model_alone),
    )


def _out_of_memory(session: CaptureSession, error: BaseException | None) -> OutOfMemory | None:
    """The script's error as out of memory, with what its training held there by category."""
    oom = out_of_memory(error, innermost_user_line)
    if oom is None:
        return None
    try:
        held = held_by_category(session.root_modules(), session.optimizers.known(), oom.memory)
    except Exception:  # noqa: BLE001 - an odd optimizer's state: the ending is told without it
        return oom
    capacity = _capacity(session, oom.memory)
    whole = too_large(oom, capacity[0])  # a shape to check, first
    fits = "; ".join(w for w in (whole, _fits(session, oom.memory, capacity)) if w)
    return replace(oom, held=tuple(held.items()), fits=fits)


def _memory_before_syncs(record: RunRecord, syncs: list) -> None:
    """A critical memory finding (a graph kept step after step, a creep that runs out within an
    epoch) ends the run: it is listed before the syncs' milliseconds."""
    kinds = ("loop.graph-kept", "loop.memory-creep")
    critical = [f for f in record.findings if f.kind in kinds and f.severity == "critical"]
    rest = [f for f in record.findings if not any(f is c for c in critical)]
    first = next((i for i, f in enumerate(rest) if any(f is s for s in syncs)), None)
    if critical and first is not None:  # a new list: a snapshot's record may share the old
        record.findings = rest[:first] + critical + rest[first:]


def _fits(session: CaptureSession, memory: str, capacity: tuple[int | None, str]) -> str:
    """The largest batch that fits, from the step the memory split counted (on the memory that
    ran out, of ``capacity``: its bytes and what bounds it); what to do where no step was
    counted."""
    split = session.data.memory_split
    on_device = split is not None and split.device != "cpu"
    if split is not None and on_device != (memory == "device"):
        return (
            f"the step counted held its tensors on {split.device}, not in the {memory} memory "
            "that ran out: the batch that fits is not estimated from it"
        )
    if split is None:
        seen = session.data.seen
        stepped = seen.get("optimizer_steps") or seen.get("backward_calls") or 0
        ran = (
            f"{stepped} step(s) of the warm-up fitted, none counted by kind (the first after "
            "the warm-up is): with a batch that grows, lower --warmup; else "
            if stepped
            else "no step was counted before it ran out: "
        )
        return (
            f"{ran}lower the batch size until a step runs, then torchdoctor run --try "
            "batch-size,checkpoint measures memory per size and what checkpointing frees"
        )
    fixed = split.parameters + split.gradients + split.optimizer_state
    # one pass's activations (a micro-batch's, where the step accumulates), and the peak beyond
    # them and the model: the temporaries of that pass
    activations = split.first_pass or split.activations
    temporaries = 0 if split.peak is None else max(split.peak - fixed - activations, 0)
    per_step = activations + temporaries
    if not split.rows:
        return "the batch's samples were not seen (no tensor input to the model): no estimate"
    return batch_that_fits(
        split.rows, fixed, per_step, capacity[0], memory, split.peak is not None, capacity[1]
    )


def _capacity(session: CaptureSession, memory: str) -> tuple[int | None, str]:
    """The device's memory, or what the host lets the process use, in bytes; and what bounds
    it when that is less than the host's (a ``ulimit -v``, a container's limit)."""
    if memory != "device":
        return host_capacity() or (None, "")
    try:
        from .._devices import total_memory_mb

        total = total_memory_mb(session.clock.device) if session.clock.device else None
        return (int(total * 2**20) if total else None), ""
    except Exception:  # noqa: BLE001 - the ending is told without it
        return None, ""


def _attach_trials(record: RunRecord, session: CaptureSession) -> None:
    """``--try``'s trials and the step's FLOPs, against the measured steps."""
    from ..analysis.trials import flops_of, trials_of

    summarise(record)  # the baseline's figures
    if session.data.trials:
        record.trials = trials_of(record, session.data.trials)
    device = record.env.device_name if record.env is not None else ""
    record.flops = flops_of(record, session.data.flops, device)
    record.flops_per_step = record.flops.per_step if record.flops is not None else None


def _attach_trace(record: RunRecord, paths: list[str]) -> None:
    from ..analysis.trace_analysis import attach_trace

    record.trace = TraceReport(recorded_files=[str(p) for p in paths])
    try:
        attach_trace(record, paths)
    except TorchdoctorError as exc:
        record.notes.append(f"the trace could not be analysed: {exc.message}")
