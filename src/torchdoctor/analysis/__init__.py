"""torchdoctor.analysis."""
