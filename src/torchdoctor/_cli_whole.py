"""``run --whole``'s check on the command line: what it cannot be combined with."""

from __future__ import annotations

import argparse

from ._errors import TorchdoctorError

#: What `run --whole` cannot be asked for at once, and why (it never changes the run).
NOT_WHOLE = {
    "fix": ("--fix", "it re-runs the script with changed settings"),
    "trials": ("--try", "it changes the script's loop to try levers"),
    "trace_dir": ("--trace", "the profiler slows the steps it records"),
    "flops": ("--flops", "counting FLOPs slows the step it counts"),
}


def check_whole(args: argparse.Namespace) -> None:
    if args.loader_doctor == "always":
        raise TorchdoctorError(
            "`loader` measures the input pipeline with its own runs; --whole only watches",
            "use `torchdoctor run --whole -- SCRIPT`",
        )
    for name, (flag, why) in NOT_WHOLE.items():
        if getattr(args, name):
            raise TorchdoctorError(
                f"--whole watches the run without changing it, and {flag} cannot: {why}",
                f"run --whole and {flag} as two runs",
            )
