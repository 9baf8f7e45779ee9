"""torchdoctor.report."""
