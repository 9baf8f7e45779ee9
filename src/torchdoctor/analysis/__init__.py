"""torchdoctor.analysis: pure functions from records and traces to findings and verdicts."""

from .trace_analysis import analyse_traces, analyze_trace

__all__ = ["analyse_traces", "analyze_trace"]
