"""The whole-step worker sweep: the script's own loop trains on batches from loader clones.

When the model runs on the CPU, DataLoader workers compete with it for cores, so the loader
alone overstates what more workers buy. Here the script keeps training while its loader's
iterator is served, setting by setting, from a clone with ``num_workers=k``, and with the main
process's intra-op threads set to the setting's count (``torch.set_num_threads``: the model's
threads compete with the workers too); the figure is training steps per second at each
``(k, threads)``. The probe settings (``num_workers`` :data:`~torchdoctor.loader.MODEL_ALONE`)
serve one batch over and over instead: the model alone, at a thread count. The script's own
thread count is restored when the sweep closes, whatever ends it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..loader import (
    MODEL_ALONE,
    WorkerThreadPolicy,
    clone_loader,
    counted_batches,
    no_worker_count_warning,
    preserved_random_state,
    shutdown_workers,
    warm_batches,
)
from ..record import WorkerSweep
from ._patch import Patcher

#: The probe's steps (the model alone, a batch replayed) are short, so its timing is noisier: it
#: counts this many times the steps of a setting, after 2 warm ones (the first step on a new
#: thread count starts the thread pool), and its rate is from their *median* step (one
#: preempted millisecond step must not decide whether the threads are idle). On the shared
#: development machine, probes of 8 steps of about 1 ms ranged from 1 thread 7% slower than 2 to
#: 2.6x faster, search to search, by their means.
PROBE_STEPS_FACTOR = 4
PROBE_WARM_STEPS = 2


class InLoopSweep:
    """Serves batches from a clone of ``loader`` at each ``(num_workers, threads)`` the policy
    asks for, with the process's intra-op threads set through ``patcher`` (restored on close)."""

    def __init__(
        self,
        loader: Any,
        policy: WorkerThreadPolicy,
        steps_per_setting: int,
        patcher: Patcher,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        on_point: Callable[[int, int, float], None] | None = None,
    ) -> None:
        self.loader = loader
        self.policy = policy
        self.steps_per_setting = steps_per_setting
        self._patcher = patcher
        self._set_threads = patcher.original(torch.set_num_threads)
        self._clock_ns = clock_ns
        self._on_point = on_point or (lambda workers, threads, rate: None)
        self._iterator: Iterator | None = None
        self._clone: Any = None
        self.workers: int | None = None
        self.threads: int | None = None
        self._replayed: Any = None  # the batch the probe serves, drawn once
        self._steps = 0
        self._warm = warm_batches(0)
        self._count = steps_per_setting
        self._counted_ms = 0.0
        self._counted_batches = 0
        self._probe_ms: list[float] = []
        self._t0 = clock_ns()

    def start(self) -> bool:
        """Switch to the next setting; False when the sweep is over (threads restored)."""
        self.close()
        setting = self.policy.next()
        if setting is None:
            return False
        self.workers, self.threads = workers, threads = setting
        self._patcher.set_state(torch.get_num_threads, self._set_threads, threads)
        self._steps = 0
        self._counted_ms = 0.0
        self._counted_batches = 0
        self._probe_ms = []
        if workers == MODEL_ALONE:
            self._warm = PROBE_WARM_STEPS
            self._count = PROBE_STEPS_FACTOR * self.steps_per_setting
            return True
        self._replayed = None  # the probe is over: its batch may go
        self._clone = clone_loader(self.loader, num_workers=workers, persistent_workers=False)
        with no_worker_count_warning():  # the sweep tries more workers than cores on purpose
            self._iterator = iter(self._clone)
        # Uncounted: the steps whose batches the new workers prefetched (they arrive at once);
        # counted: whole rounds of batches (with workers they arrive several at once, then a wait).
        self._warm = warm_batches(workers, getattr(self._clone, "prefetch_factor", None))
        self._count = counted_batches(workers, self.steps_per_setting)
        return True

    def next_batch(self, orig_next: Callable[[Any], Any]) -> Any:
        """The next batch of the current clone, starting a new epoch when one runs out (the
        probe's one batch, for the model alone)."""
        if self.workers == MODEL_ALONE:
            if self._replayed is None:
                single = clone_loader(self.loader, num_workers=0)
                with preserved_random_state(self.loader):
                    self._replayed = orig_next(iter(single))
            return self._replayed
        assert self._iterator is not None
        try:
            return orig_next(self._iterator)
        except StopIteration:
            shutdown_workers(self._iterator)
            with no_worker_count_warning():
                self._iterator = iter(self._clone)
            return orig_next(self._iterator)

    def on_step_end(self, step_ms: float, batches: int) -> bool:
        """Count a finished step; returns True when the whole sweep is over."""
        self._steps += 1
        if self._steps > self._warm:
            self._counted_ms += step_ms
            self._counted_batches += batches
            if self.workers == MODEL_ALONE:
                self._probe_ms.append(step_ms)
        if self._steps < self._warm + self._count:
            return False
        if self._probe_ms:  # one batch a step: the median step's rate
            median = statistics.median(self._probe_ms)
            rate = 1000.0 / median if median > 0 else 0.0
        else:
            rate = (
                self._counted_batches * 1000.0 / self._counted_ms if self._counted_ms > 0 else 0.0
            )
        assert self.workers is not None and self.threads is not None
        self.policy.add(self.workers, self.threads, rate, batches=self._counted_batches)
        self._on_point(self.workers, self.threads, rate)
        return not self.start()

    def result(self) -> WorkerSweep:
        return self.policy.result(
            measures="step", seconds=round((self._clock_ns() - self._t0) / 1e9, 3)
        )

    def close(self) -> None:
        """Stop the clone's workers and give the script its own thread count back."""
        if self._iterator is not None:
            shutdown_workers(self._iterator)
        self._iterator = None
        self._clone = None
        self._patcher.restore()
