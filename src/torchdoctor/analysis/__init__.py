"""torchdoctor.analysis: pure functions from records, events and traces to findings and verdicts."""

from .syncs import sync_findings
from .trace_analysis import analyse_traces, analyze_trace

__all__ = ["analyse_traces", "analyze_trace", "sync_findings"]
