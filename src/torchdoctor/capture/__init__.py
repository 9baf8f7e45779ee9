"""torchdoctor.capture."""
