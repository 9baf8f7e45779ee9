"""The loader doctor's results in the record: the worker sweep, transform costs, memory.

Produced by :func:`torchdoctor.loader.diagnose_loader` (or, for the whole-step sweep, by the
capture), saved in ``RunRecord.loader_report`` and rendered by :mod:`torchdoctor.report.loader`.
The field names are those of the schema-1 ``extra`` entries, so v1 files load into them.
Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: :meth:`WorkerSweep.best` default tolerance; the policy in :mod:`torchdoctor.loader` uses it.
DEFAULT_PICK_TOLERANCE = 0.05


@dataclass
class SweepPoint:
    """One measured ``num_workers`` setting."""

    num_workers: int
    batches_per_s: float
    #: Time from creating the iterator to the first batch (worker startup), when measured.
    first_batch_ms: float | None = None
    #: Median and 90th percentile of the time between consecutive batches, when measured.
    batch_ms_median: float | None = None
    batch_ms_p90: float | None = None
    batches: int = 0
    #: The main process's ``torch.get_num_threads()`` during the trial (the whole-step sweep of
    #: a CPU model searches it with the workers); ``None`` when the sweep left it alone.
    threads: int | None = None
    #: The whole-step sweep's fastest settings are measured again side by side before the pick:
    #: those rates (``batches_per_s`` is then their mean), ...
    repeats: list[float] = field(default_factory=list)
    #: ... and the rate first measured on the way, for the record.
    first_batches_per_s: float | None = None


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
    #: The chosen main-process thread count, when the sweep searched threads with workers.
    best_threads: int | None = None
    #: The script's own ``torch.get_num_threads()`` when the sweep searched threads.
    default_threads: int | None = None
    #: The model alone (a batch replayed) with the script's own threads and with 1: whether the
    #: model gains from its threads (``batches_per_s`` is its steps per second).
    threads_probe: list[SweepPoint] = field(default_factory=list)

    def point(self, num_workers: int, threads: int | None = None) -> SweepPoint | None:
        """The measured point at ``num_workers`` and ``threads`` (default: the script's own
        thread count), if it was measured."""
        wanted = threads if threads is not None else self.default_threads
        for p in self.points:
            if p.num_workers == num_workers and (wanted is None or p.threads in (None, wanted)):
                return p
        return None

    @property
    def best(self) -> SweepPoint:
        """The point of the chosen setting."""
        point = self.point(self.best_workers, self.best_threads)
        assert point is not None
        return point

    @property
    def threads_change(self) -> int | None:
        """The chosen thread count when it differs from the script's own, else ``None``."""
        if self.best_threads is None or self.best_threads == self.default_threads:
            return None
        return self.best_threads

    def speedup_over(self, num_workers: int) -> float | None:
        """Measured throughput at the chosen setting over that at ``num_workers`` (with the
        script's own thread count)."""
        other = self.point(num_workers)
        if other is None or other.batches_per_s <= 0:
            return None
        return self.best.batches_per_s / other.batches_per_s


@dataclass
class TransformCost:
    """One part of the time to make a batch."""

    name: str
    #: Share of the time to make one batch (``batch_size`` samples + collate), 0..1.
    share: float
    ms_per_batch: float
    #: "transform", "outside", "function" (from a profile), "library" (library code called
    #: from ``__getitem__``, from a profile), "dataset-library" (the dataset's own
    #: ``__getitem__`` is a library's, such as TensorDataset's), "other" or "collate".
    kind: str = "transform"
    #: Calls per sample (a transform applied twice, a function called in a loop).
    calls_per_sample: float | None = None


@dataclass
class BatchLeaf:
    """One array in a batch."""

    path: str
    dtype: str
    shape: list[int]
    nbytes: int
    min: float | None = None
    max: float | None = None
    mean: float | None = None


@dataclass
class LoaderMemory:
    """Bytes of a batch and of the batches the loader keeps in flight."""

    bytes_per_batch: int
    num_workers: int
    prefetch_factor: int
    batches_in_flight: int
    bytes_in_flight: int
    #: The same batch with the dtype advice applied.
    bytes_per_batch_advised: int
    leaves: list[BatchLeaf] = field(default_factory=list)


@dataclass
class CopyOnRead:
    """The trend of worker memory over a run."""

    flagged: bool
    growth_mb: float
    start_mb: float
    end_mb: float
    correlation: float | None
    samples: int


@dataclass
class WorkerMemorySeries:
    """Worker memory per sample time (only times at which at least one worker was alive)."""

    interval_s: float
    timeline_s: list[float] = field(default_factory=list)
    workers: list[int] = field(default_factory=list)
    #: Mean over live workers of their USS / RSS, in MB.
    uss_mb_per_worker: list[float] = field(default_factory=list)
    rss_mb_per_worker: list[float] = field(default_factory=list)
    uss_mb_total: list[float] = field(default_factory=list)


@dataclass
class LoaderReport:
    """Everything the loader doctor measured (its findings go to ``RunRecord.findings``).

    Schema 1 kept these as separate ``extra`` keys; ``memory`` was ``loader_memory`` and
    ``seconds`` was ``loader_doctor_s``.
    """

    worker_sweep: WorkerSweep | None = None
    transforms: list[TransformCost] = field(default_factory=list)
    memory: LoaderMemory | None = None
    copy_on_read: CopyOnRead | None = None
    worker_memory: WorkerMemorySeries | None = None
    #: Seconds spent per measurement ("costs", "sweep", "memory").
    seconds: dict[str, float] = field(default_factory=dict)
