"""torchdoctor.capture: live instrumentation of a running script."""

from .profiler import StepProfiler

__all__ = ["StepProfiler"]
