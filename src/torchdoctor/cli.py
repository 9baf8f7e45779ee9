"""The ``torchdoctor`` command line: parse arguments, call the pieces, map errors to exit codes.

Each subcommand is one ``_add_<name>`` function that declares its arguments and sets
``handler``; the handler returns an exit status. Heavy imports (torch) happen inside handlers so
``torchdoctor --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from . import __version__
from ._errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, TorchdoctorError


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchdoctor`` console script."""
    parser = build_parser()
    args = parser.parse_args(_split_script_args(list(sys.argv[1:] if argv is None else argv)))
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return handler(args)
    except TorchdoctorError as exc:
        _print_error(exc.message, exc.hint)
        return exc.exit_status
    except KeyboardInterrupt:
        _print_error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_INTERNAL


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchdoctor",
        description="Find what bounds a PyTorch training run, by measurement.",
    )
    parser.add_argument("--version", action="version", version=f"torchdoctor {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _split_script_args(argv: list[str]) -> list[str]:
    """Keep everything after the script (or ``-m MODULE``) away from torchdoctor's own options.

    ``torchdoctor run --steps 5 -- train.py --lr 0.1`` and ``torchdoctor run train.py --lr 0.1``
    both give the script ``--lr 0.1``. The tail is packed after ``--`` so argparse leaves it alone.
    """
    if not argv or argv[0] not in _SCRIPT_COMMANDS:
        return argv
    takes_value = _SCRIPT_COMMANDS[argv[0]]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv
        if arg == "-m":
            # -m MODULE ARGS...: the module and its args go to the script.
            return argv[:i] + ["--", "-m"] + argv[i + 1 :]
        if arg.startswith("-"):
            if "=" not in arg and arg in takes_value:
                i += 1
            i += 1
            continue
        return argv[:i] + ["--"] + argv[i:]
    return argv


def _print_error(message: str, hint: str | None = None) -> None:
    print(f"torchdoctor: error: {message}", file=sys.stderr)
    if hint:
        print(f"  fix: {hint}", file=sys.stderr)


def _target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        metavar="-- SCRIPT [ARGS...] | -m MODULE [ARGS...]",
        help="the training script (run as __main__ with its own arguments), or -m MODULE",
    )


# --- run -----------------------------------------------------------------------------------


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="diagnose a training script: measure, find the bound, suggest the fix",
        description=(
            "Run SCRIPT for a bounded number of optimizer steps, measure where each step's time "
            "goes, then measure the same loop with data made free and the loader alone, and say "
            "what bounds the run."
        ),
    )
    _run_options(p)
    _target_args(p)
    p.set_defaults(handler=_cmd_run)


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=_positive_int, default=20, help="measured steps (default 20)")
    p.add_argument(
        "--warmup", type=_non_negative_int, default=5, help="steps before measuring (default 5)"
    )
    p.add_argument("--json", metavar="PATH", help="write the run record as JSON to PATH")
    p.add_argument(
        "--no-counterfactuals",
        action="store_true",
        help="skip the model-alone and loader-alone phases",
    )
    p.add_argument("--quiet", action="store_true", help="no progress, only the report")


def _cmd_run(args: argparse.Namespace) -> int:
    from .runner import RunOptions, run_cli

    target = _parse_target(args.target)
    options = RunOptions(
        steps=args.steps,
        warmup=args.warmup,
        counterfactuals=not args.no_counterfactuals,
    )
    return run_cli(target, options, json_path=args.json, quiet=args.quiet)


def _parse_target(rest: list[str]):
    from .runner import Target

    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise TorchdoctorError(
            "no script given", "torchdoctor run [OPTIONS] -- SCRIPT [ARGS...] (or -m MODULE)"
        )
    if rest[0] == "-m":
        if len(rest) < 2:
            raise TorchdoctorError("-m needs a module name", "torchdoctor run -m package.module")
        return Target(module=rest[1], argv=rest[2:])
    return Target(script=rest[0], argv=rest[1:])


# --- report --------------------------------------------------------------------------------


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="re-render a saved run record (JSON) without re-running")
    p.add_argument("path", help="a record written by `torchdoctor run --json PATH`")
    p.set_defaults(handler=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from .record import RecordError, RunRecord
    from .report.terminal import render

    try:
        record = RunRecord.load(args.path)
    except RecordError as exc:
        raise TorchdoctorError(str(exc), "pass a file written by `torchdoctor run --json`") from None
    render(record)
    return 0


# --- demo ----------------------------------------------------------------------------------


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="diagnose a built-in slow training script, fix it, and measure the speedup",
    )
    p.add_argument("--json", metavar="DIR", help="write DIR/before.json and DIR/after.json")
    p.add_argument("--steps", type=_positive_int, default=20, help="measured steps per run")
    p.add_argument("--workdir", metavar="DIR", help="where to generate the demo images")
    p.set_defaults(handler=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(json_dir=args.json, steps=args.steps, workdir=args.workdir)


# --- helpers -------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


#: Subcommands that take a script after their options, and which of their options take a value.
_SCRIPT_COMMANDS: dict[str, set[str]] = {
    "run": {"--steps", "--warmup", "--json"},
}

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_run,
    _add_report,
    _add_demo,
]
