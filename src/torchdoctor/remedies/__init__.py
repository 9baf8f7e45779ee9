"""torchdoctor.remedies."""
