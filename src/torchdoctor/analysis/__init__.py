"""torchdoctor.analysis: pure functions from records and events to findings (no torch import)."""

from torchdoctor.analysis.syncs import sync_findings

__all__ = ["sync_findings"]
