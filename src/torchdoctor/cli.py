"""The ``torchdoctor`` command line: parse arguments, call the pieces, map errors to exit codes.

Each subcommand is one ``_add_<name>`` function that declares its arguments and sets
``handler``; the handler returns an exit status. Heavy imports (torch) happen inside handlers so
``torchdoctor --help`` stays fast.
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from . import __version__
from ._cli_cache import add_cache
from ._cli_compare import add_compare
from ._cli_whole import check_whole
from ._errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, TorchdoctorError
from ._paths import check_output_dir, check_output_file
from .options import add_flags, from_args, positive_int


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchdoctor`` console script."""
    parser = build_parser()
    args = parser.parse_args(
        _split_script_args(list(sys.argv[1:] if argv is None else argv), parser)
    )
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    # Until a run's supervisor takes them over, SIGTERM ends torchdoctor like Ctrl-C does: with
    # exit status 130 and, for `run`, a record saying the script never started.
    previous_term = _on_sigterm_interrupt()
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
    except Exception:  # noqa: BLE001 - the one boundary: a bug of ours, not the user's mistake
        # Every user-caused error is a TorchdoctorError (status 2 and its message, above); what
        # reaches here is torchdoctor's own failure. Without this it would exit 1, the status
        # of a script that raised.
        traceback.print_exc()
        _print_error(
            "torchdoctor itself failed (the traceback above is of its code, not yours)",
            "please report this with the traceback and the command line",
        )
        return EXIT_INTERNAL
    finally:
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)


def _on_sigterm_interrupt() -> Any:
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (main() called from a thread): leave it
        return None


class _Parser(argparse.ArgumentParser):
    """argparse with torchdoctor's error format: an ``error:`` line, then a ``fix:`` line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"torchdoctor: error: {message}\n  fix: see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="torchdoctor",
        description="Find what bounds a PyTorch training run, by measurement.",
    )
    parser.add_argument("--version", action="version", version=f"torchdoctor {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _split_script_args(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """Keep everything after the script (or ``-m MODULE``) away from torchdoctor's own options.

    ``torchdoctor run --steps 5 -- train.py --lr 0.1`` and ``torchdoctor run train.py --lr 0.1``
    both give the script ``--lr 0.1``. The tail is packed after ``--`` so argparse leaves it alone.
    Which options take a value (so that ``--steps 5`` does not make ``5`` the script) is read
    from ``parser`` itself: a flag added to the parser is known here with nothing else to edit.
    """
    script_commands = _script_commands(parser)
    if not argv or argv[0] not in script_commands:
        return argv
    takes_value = script_commands[argv[0]]
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


def _script_commands(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Subcommands that take a script after their options -> their option strings that take a value.

    A subcommand takes a script when it has a positional that swallows the rest of the line
    (``nargs=REMAINDER``, see :func:`_target_args`); an option takes a value unless its action
    takes none (``nargs=0``: switches, ``--help``).
    """
    commands: dict[str, set[str]] = {}
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, sub in action.choices.items():
            actions = sub._actions
            if not any(a.nargs == argparse.REMAINDER and not a.option_strings for a in actions):
                continue
            commands[name] = {
                option
                for a in actions
                if a.option_strings and a.nargs != 0
                for option in a.option_strings
            }
    return commands


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
            "what bounds the run. With --whole, watch the script to its own end instead and "
            "account for every second of the run by kind."
        ),
    )
    _run_options(p, loader_doctor="auto")


def _add_loader(sub: argparse._SubParsersAction) -> None:
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
    _target_args(p)
    # None: not given (options.from_args gives a bounded run the default, a whole run none)
    p.set_defaults(handler=_cmd_run, loader_doctor=loader_doctor, max_seconds=None)


def _cmd_run(args: argparse.Namespace) -> int:
    from .process import run_cli

    target = _parse_target(args.target)
    if args.whole:
        check_whole(args)
    return run_cli(target, from_args(args, **_checked_outputs(args)))


def _checked_outputs(args: argparse.Namespace) -> dict[str, str]:
    """``--json`` and ``--trace`` checked before the script runs, made absolute.

    A bad path then costs a message instead of the whole run, and a script that ``os.chdir``s
    cannot move the record or the trace (relative paths mean where torchdoctor was started).
    """
    checked = {}
    if args.json_path is not None:
        checked["json_path"] = check_output_file(args.json_path, "--json")
    if args.trace_dir is not None:
        checked["trace_dir"] = check_output_dir(args.trace_dir, "--trace")
    if args.html_path is not None:
        checked["html_path"] = check_output_file(args.html_path, "--html", example="run.html")
    if args.timeline_path is not None:
        checked["timeline_path"] = check_output_file(
            args.timeline_path, "--timeline", example="timeline.json"
        )
    return checked


def _parse_target(rest: list[str]):
    from .process import Target

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


# --- fix -----------------------------------------------------------------------------------


def _add_fix(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fix",
        help="diagnose, write the measured remedies into your code as a patch, measure it",
        description=(
            "Diagnose SCRIPT as `run` does, write each measured remedy (DataLoader settings, "
            "torch threads, host round-trip rewrites) at the place in your code where it lives "
            "as a unified diff, run the patched code against the original in alternation, and "
            "keep in the diff only what measured faster beyond the noise (rewrites: what "
            "computes the same losses) (docs/fix.md). Your files are untouched unless --apply."
        ),
    )
    add_flags(p)
    p.add_argument(
        "--out",
        metavar="PATH",
        default="torchdoctor-fix.diff",
        help="where to write the diff (default %(default)s; `git apply PATH` takes it)",
    )
    p.add_argument(
        "--apply",
        action="store_true",
        help="also write the patch into your files (the originals are copied to a backup folder "
        "first)",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=2,
        help="rounds of alternated runs (original, each remedy, the whole patch) (default "
        "%(default)s)",
    )
    _target_args(p)
    p.set_defaults(handler=_cmd_fix, loader_doctor="auto", max_seconds=None)


def _cmd_fix(args: argparse.Namespace) -> int:
    from .patch import check_patchable, fix_cli
    from .process import resolve_target

    if args.fix:
        raise TorchdoctorError("fix always measures its patch: --fix is `run`'s", "leave out --fix")
    if args.whole:
        raise TorchdoctorError(
            "fix runs the script for a bounded number of steps: --whole is `run`'s",
            "leave out --whole",
        )
    target = _parse_target(args.target)
    check_patchable(resolve_target(target))
    out = check_output_file(args.out, "--out", example="fix.diff")
    options = from_args(args, **_checked_outputs(args))
    return fix_cli(target, options, out=out, apply=args.apply, rounds=args.rounds)


# --- report --------------------------------------------------------------------------------


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="re-render a saved run record (JSON) without re-running")
    p.add_argument("path", help="a record written by `torchdoctor run --json PATH`")
    p.add_argument(
        "--html", metavar="PATH", help="write it as one self-contained HTML page to PATH instead"
    )
    p.set_defaults(handler=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from .record import RecordError, RunRecord
    from .report.terminal import render

    try:
        record = RunRecord.load(args.path)
    except RecordError as exc:
        raise TorchdoctorError(
            str(exc), "pass a file written by `torchdoctor run --json`"
        ) from None
    from .analysis.compare import impossible_steps, step_times

    bad = impossible_steps(step_times(record))
    if bad:
        raise TorchdoctorError(
            f"{args.path}: the record has {bad}",
            "re-run the diagnosis with --json; report and compare only records of measured runs",
        )
    if args.html is not None:
        check_output_file(args.html, "--html", example="run.html")
    try:
        if args.html is not None:
            from .report.html import write_html

            write_html(record, args.html)
            print(f"HTML report written to {args.html}")
        else:
            render(record)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as exc:
        # The loader checks the type of every typed field, not every value (NaN, 1e300) nor the
        # free-form ``seen`` and ``detail``: an edited file can still hold what cannot be shown.
        raise TorchdoctorError(
            f"{args.path}: the record holds a value that cannot be shown "
            f"({type(exc).__name__}: {exc}); was the file edited?",
            "re-run the diagnosis with --json (a file torchdoctor wrote that fails here, "
            "unedited, is a torchdoctor bug: send it to the maintainers)",
        ) from None
    return 0


# --- analyze -------------------------------------------------------------------------------


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="explain torch.profiler (Kineto) traces: what bounds the run, and why",
        description=(
            "Read .json or .json.gz torch.profiler traces (files, or directories holding one "
            "file per rank), break each ProfilerStep's time down, measure GPU idle time the way "
            "HolisticTraceAnalysis does, find syncs, pageable copies and launch overhead, and "
            "say what bounds the run."
        ),
    )
    p.add_argument("traces", nargs="+", metavar="TRACE_OR_DIR", help="trace files or directories")
    p.add_argument("--json", metavar="PATH", help="write the analysis record as JSON to PATH")
    p.add_argument("--html", metavar="PATH", help="also write the report as an HTML page")
    p.add_argument(
        "--include-last-step",
        action="store_true",
        help="keep the last ProfilerStep (left out by default, as HTA does)",
    )
    p.set_defaults(handler=_cmd_analyze)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from .analysis.trace_analysis import analyze_trace
    from .report.trace_terminal import render_trace_report

    if args.json is not None:
        check_output_file(args.json, "--json", example="analysis.json")
    if args.html is not None:
        check_output_file(args.html, "--html", example="analysis.html")
    record = analyze_trace(
        args.traces,
        include_last_step=args.include_last_step,
        command=["torchdoctor", "analyze", *args.traces],
    )
    render_trace_report(record)
    if args.json:
        record.save(args.json)
    if args.html:
        from .report.html import write_html

        write_html(record, args.html)
        print(f"HTML report written to {args.html}")
    return 0


# --- demo ----------------------------------------------------------------------------------


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="diagnose a built-in slow training script, fix it, and measure the speedup",
    )
    p.add_argument("--json", metavar="DIR", help="write DIR/before.json and DIR/after.json")
    p.add_argument("--steps", type=positive_int, default=20, help="measured steps per run")
    p.add_argument("--workdir", metavar="DIR", help="where to generate the demo images")
    p.add_argument(
        "--html",
        metavar="PATH",
        default="torchdoctor-demo.html",
        help="the HTML page with both diagnoses and the measured speedup (default %(default)s)",
    )
    p.set_defaults(handler=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    for path, flag in ((args.json, "--json"), (args.workdir, "--workdir")):
        if path is not None:
            check_output_dir(path, flag)
    html = check_output_file(args.html, "--html", example="demo.html")
    return run_demo(json_dir=args.json, steps=args.steps, workdir=args.workdir, html=html)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_run,
    _add_loader,
    _add_fix,
    _add_report,
    _add_analyze,
    _add_demo,
    add_compare,
    add_cache,
]
