"""The phases of a capture by name: the one place their names and their words are written.

The capture's phase table (``capture.phases.PHASES``) runs them in the order below; the stream,
the endings, the timeline and the progress display speak of them by these names. Torch-free.
"""

from __future__ import annotations

WARMUP = "warmup"
SYNC_SAMPLE = "sync-sample"
TRACE = "trace"
MEASURE = "measure"
MODEL_ALONE = "model-alone"
MEASURE_AGAIN = "measure-again"
NO_SYNC = "no-sync"
FLOPS = "flops"
TRIALS = "trials"
WORKER_SWEEP = "worker-sweep"
LOADER_ALONE = "loader-alone"
LOADER_DOCTOR = "loader-doctor"
#: ``run --whole``: the one phase of a whole run.
WHOLE = "whole"
#: After the last phase: the script is stopped.
DONE = "done"

#: What each phase is doing, as the progress display says it, in the order the phases run.
PHASE_WORDS: dict[str, str] = {
    WARMUP: "warming up",
    SYNC_SAMPLE: "watching steps for host syncs (untimed)",
    TRACE: "recording a profiler trace (untimed)",
    MEASURE: "measuring steps",
    MODEL_ALONE: "model alone (data made free)",
    MEASURE_AGAIN: "measuring steps again (after the model alone)",
    NO_SYNC: "no gradient all-reduce (communication made free)",
    FLOPS: "counting one step's FLOPs",
    TRIALS: "trying levers in the loop (--try)",
    WORKER_SWEEP: "worker sweep (settings of num_workers)",
    LOADER_ALONE: "loader alone (no model)",
    LOADER_DOCTOR: "loader doctor (transform costs, memory)",
    WHOLE: "watching the whole run",
}

#: Phases whose steps are timed part by part (kept one by one in the step log, the timeline).
TIMED_PHASES = (MEASURE, MODEL_ALONE, NO_SYNC)
