"""torchdoctor.trace."""
