"""torchdoctor.cli: the ``torchdoctor`` command line.

``main`` parses the arguments and is the one boundary where errors become exit statuses; each
command is a module of its own (``run``, ``fix``, ``report``, ``analyze``, ``compare``, ``cache``,
``demo`` with the script it runs). Importing it does not import torch: commands import what they
need when they run.
"""

from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]
