"""Record a torch.profiler trace of a few training steps, where TensorBoard and Perfetto open it.

:class:`StepProfiler` wraps ``torch.profiler.profile`` with a wait/warmup/active schedule.
The caller marks each optimizer-step boundary with :meth:`StepProfiler.step`; the trace of the
active steps is written by ``torch.profiler.tensorboard_trace_handler`` as
``OUT_DIR/<worker>.<timestamp>.pt.trace.json``, the layout TensorBoard's profiler plugin reads
and that Perfetto (ui.perfetto.dev) and ``torchdoctor analyze`` open directly.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

#: Prefix of the record_function labels torchdoctor adds, so they are easy to find in a trace.
LABEL_PREFIX = "torchdoctor/"


class StepProfiler:
    """Profile ``active`` steps after ``wait`` skipped and ``warmup`` warm-up steps.

    Args:
        out_dir: directory the trace file is written to (created if missing).
        wait: steps at the start that are not profiled at all.
        warmup: steps profiled but thrown away (the profiler's own start-up cost lands here).
        active: steps recorded into the trace.
        with_stack: record Python stacks so syncs can be traced to the user's lines (costs
            some overhead during the active steps only).
        record_shapes: record operator input shapes.

    Usage::

        prof = StepProfiler("traces/")
        prof.start()
        try:
            for batch in loader:
                with prof.label("forward"):
                    loss = model(batch)
                ...
                optimizer.step()
                prof.step()
        finally:
            prof.stop()
        print(prof.trace_paths)
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        *,
        with_stack: bool = True,
        record_shapes: bool = False,
    ) -> None:
        if wait < 0 or warmup < 0 or active < 1:
            raise ValueError("wait and warmup must be >= 0 and active >= 1")
        self.out_dir = Path(out_dir)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.with_stack = with_stack
        self.record_shapes = record_shapes
        #: Trace files written (filled when the active steps end or at :meth:`stop`).
        self.trace_paths: list[Path] = []
        self._prof: Any = None
        self._steps = 0
        self._stopped = False

    @property
    def steps_seen(self) -> int:
        """Step boundaries marked so far."""
        return self._steps

    @property
    def running(self) -> bool:
        """Whether the profiler is started and not yet stopped."""
        return self._prof is not None

    def start(self) -> None:
        """Start the profiler (the schedule then advances on each :meth:`step`)."""
        if self._prof is not None or self._stopped:
            return
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        self.out_dir.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        device_activity = _device_activity(ProfilerActivity)
        if device_activity is not None:
            activities.append(device_activity)
        handler = torch.profiler.tensorboard_trace_handler(str(self.out_dir))

        def on_trace_ready(prof: Any) -> None:
            before = set(self.out_dir.iterdir())
            handler(prof)
            new = sorted(set(self.out_dir.iterdir()) - before)
            self.trace_paths.extend(p for p in new if p.name.endswith((".json", ".json.gz")))

        prof = profile(
            activities=activities,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=on_trace_ready,
            with_stack=self.with_stack,
            record_shapes=self.record_shapes,
        )
        prof.start()
        self._prof = prof

    def step(self) -> None:
        """Mark an optimizer-step boundary (a no-op before :meth:`start` or after :meth:`stop`)."""
        if self._prof is None:
            return
        self._steps += 1
        self._prof.step()

    def stop(self) -> None:
        """Stop and release the profiler, writing the trace if steps were recorded. Idempotent."""
        prof, self._prof = self._prof, None
        self._stopped = True
        if prof is None:
            return
        prof.stop()

    def label(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """A ``record_function`` context labelling a torchdoctor phase (``torchdoctor/NAME``).

        Outside a running profile it costs almost nothing, so phases can always be labelled.
        """
        if self._prof is None:
            return contextlib.nullcontext()
        from torch.profiler import record_function

        return record_function(LABEL_PREFIX + name)

    def __enter__(self) -> StepProfiler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _device_activity(activity: Any) -> Any:
    """The profiler activity of the accelerator present here (CUDA, XPU, MTIA, or a PrivateUse1
    backend such as OpenReg), or ``None`` on a CPU-only machine."""
    import torch

    from .._devices import current_accelerator

    device = current_accelerator()
    if device is None:
        return None
    named = {"cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA", "hpu": "HPU"}.get(device.type)
    if named is None and device.type == torch._C._get_privateuse1_backend_name():
        named = "PrivateUse1"
    return getattr(activity, named, None) if named else None
