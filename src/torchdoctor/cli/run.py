"""``torchdoctor run`` and ``torchdoctor loader``: diagnose a script (docs/cli.md), and what
``run --whole`` cannot be combined with."""

from __future__ import annotations

import argparse

from .._errors import TorchdoctorError
from ..options import add_flags, from_args
from ._target import checked_outputs, parse_target, target_args


def add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="diagnose a training script: measure, find the bound, suggest the fix",
        description=(
            "Run SCRIPT for a bounded number of optimizer steps, measure where each step's time "
            "goes, then measure the same loop with data made free and the loader alone, and say "
            "what bounds the run. With --whole, watch the script to its own end instead and "
            "account for every second of the run by kind."
        ),
    )
    _run_options(p, loader_doctor="auto")


def add_loader(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "loader",
        help="the loader doctor: worker sweep, per-transform costs, memory (and --fix)",
        description=(
            "Diagnose a script like `run`, and always measure its input pipeline: the "
            "num_workers sweep, the cost of each transform in __getitem__, batch memory and "
            "worker memory growth."
        ),
    )
    _run_options(p, loader_doctor="always")


def _run_options(p: argparse.ArgumentParser, loader_doctor: str) -> None:
    """The options and target of `run` and `loader` (which differ in ``loader_doctor``)."""
    add_flags(p)
    target_args(p)
    # None: not given (options.from_args gives a bounded run the default, a whole run none)
    p.set_defaults(handler=_cmd_run, loader_doctor=loader_doctor, max_seconds=None)


def _cmd_run(args: argparse.Namespace) -> int:
    from ..process import run_cli

    target = parse_target(args.target)
    if args.whole:
        check_whole(args)
    return run_cli(target, from_args(args, **checked_outputs(args)))


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
