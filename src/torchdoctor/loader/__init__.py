"""torchdoctor.loader: the loader doctor, from a user's DataLoader to findings and a verified fix.

Everything outside this package imports from here. The pieces:

- ``_rules``: the DataLoader's argument rules and the warm-up and round rules of every
  measurement, written once (:func:`valid_loader_kwargs`, :func:`warm_batches`,
  :func:`counted_batches`);
- ``_clone``: copies of the user's loader (:func:`clone_loader`), never the loader itself;
- ``_samplers``: the sampler chain behind a loader and the batch size it carries
  (:func:`batch_size_of`);
- ``_measure``: timing a clone alone, at one worker count or over a sweep;
- ``_policy``: which worker counts to try and when to stop (:class:`SweepPolicy`), pure;
- ``_threads``: the whole-step sweep's search of worker counts with the main process's
  threads (:class:`WorkerThreadPolicy`), pure;
- ``_advice``: the DataLoader settings to change (:func:`sweep_advice`), pure;
- ``_transforms`` and ``_costs``: where the time to make a batch goes;
- ``_memory`` and ``_children``: bytes in flight, dtypes, copy-on-read, worker memory;
- ``_doctor``: all of it in one call (:func:`diagnose_loader`);
- ``_fix``: the ``--fix`` re-run with the advised settings (:func:`fix_trial`).

The results are record types (:class:`~torchdoctor.record.LoaderReport`,
:class:`~torchdoctor.record.FixTrial`...). torch is imported only when a loader is measured.
"""

from __future__ import annotations

from ._advice import sweep_advice
from ._children import ChildrenMemory, WorkerMemorySampler, sample_children, sample_worker_memory
from ._clone import (
    clone_loader,
    is_clone,
    loader_kwargs,
    loader_settings,
    no_worker_count_warning,
    preserved_random_state,
    quiet_iter,
    sample_batch,
    shutdown_workers,
)
from ._costs import (
    COLLATE,
    COSTLY_SHARE,
    OUTSIDE_TRANSFORMS,
    function_name,
    profile_costs,
    transform_costs,
    transform_findings,
)
from ._doctor import LoaderDiagnosis, diagnose_loader, loader_findings
from ._fix import (
    Rerun,
    fix_code,
    fix_settings,
    fix_threads,
    fix_trial,
    predicted_speedup,
    predicted_step_ms,
    rerun_window,
)
from ._measure import (
    Clock,
    measure_loader,
    measure_loader_alone,
    measure_loader_point,
    sweep_loader,
)
from ._memory import (
    COPY_ON_READ_MIN_GROWTH_MB,
    copy_on_read_finding,
    describe_batch,
    detect_copy_on_read,
    dtype_advice,
    loader_memory,
)
from ._policy import (
    MAX_SWEEP_WORKERS,
    PLATEAU_GAIN,
    PLATEAU_PATIENCE,
    TARGET_HEADROOM,
    SweepPolicy,
    available_cpus,
    max_sweep_workers,
    pick_workers,
    sweep_candidates,
)
from ._rules import (
    DEFAULT_PREFETCH_FACTOR,
    MIN_ROUNDS,
    WORKER_ONLY,
    counted_batches,
    valid_loader_kwargs,
    warm_batches,
)
from ._samplers import batch_size_of, sampler_chain
from ._threads import (
    MODEL_ALONE,
    PATH_PATIENCE,
    Setting,
    WorkerThreadPolicy,
    pick_setting,
    thread_candidates,
)
from ._transforms import find_transform_pipelines, is_compose_like, measure_getitem_costs

__all__ = [
    "COLLATE",
    "COPY_ON_READ_MIN_GROWTH_MB",
    "COSTLY_SHARE",
    "DEFAULT_PREFETCH_FACTOR",
    "MAX_SWEEP_WORKERS",
    "MIN_ROUNDS",
    "MODEL_ALONE",
    "OUTSIDE_TRANSFORMS",
    "PATH_PATIENCE",
    "PLATEAU_GAIN",
    "PLATEAU_PATIENCE",
    "TARGET_HEADROOM",
    "WORKER_ONLY",
    "ChildrenMemory",
    "Clock",
    "LoaderDiagnosis",
    "Rerun",
    "Setting",
    "SweepPolicy",
    "WorkerMemorySampler",
    "WorkerThreadPolicy",
    "available_cpus",
    "batch_size_of",
    "clone_loader",
    "is_clone",
    "copy_on_read_finding",
    "counted_batches",
    "describe_batch",
    "detect_copy_on_read",
    "diagnose_loader",
    "dtype_advice",
    "find_transform_pipelines",
    "fix_code",
    "fix_settings",
    "fix_threads",
    "fix_trial",
    "function_name",
    "is_compose_like",
    "loader_findings",
    "loader_kwargs",
    "loader_memory",
    "loader_settings",
    "max_sweep_workers",
    "measure_getitem_costs",
    "measure_loader",
    "measure_loader_alone",
    "measure_loader_point",
    "no_worker_count_warning",
    "pick_setting",
    "pick_workers",
    "predicted_speedup",
    "predicted_step_ms",
    "rerun_window",
    "preserved_random_state",
    "profile_costs",
    "quiet_iter",
    "sample_batch",
    "sample_children",
    "sample_worker_memory",
    "sampler_chain",
    "shutdown_workers",
    "sweep_advice",
    "sweep_candidates",
    "sweep_loader",
    "thread_candidates",
    "transform_costs",
    "transform_findings",
    "valid_loader_kwargs",
    "warm_batches",
]
