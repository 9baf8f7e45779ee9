"""torchdoctor.analysis: pure functions from measurements, events and traces to findings and
verdicts (no torch import). The loader doctor's analyses live in :mod:`torchdoctor.loader`."""

from .syncs import sync_findings
from .trace_analysis import analyze_parsed_traces, analyze_trace

__all__ = [
    "analyze_parsed_traces",
    "analyze_trace",
    "sync_findings",
]
