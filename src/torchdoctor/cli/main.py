"""The ``torchdoctor`` command line: parse arguments, call the pieces, map errors to exit codes.

Each command is one module of this package (``run`` with ``loader``, ``fix``, ``report``,
``analyze``, ``demo``, ``compare``, ``cache``) whose ``add_<name>`` declares its arguments and sets
``handler``; the handler returns an exit status, and :func:`main` is the one error boundary. Heavy imports (torch) happen inside handlers so
``torchdoctor --help`` stays fast.
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .. import __version__
from .._errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, TorchdoctorError
from .._paths import asks_for_stdout, record_on_stdout
from ..record import INTERRUPTED
from .analyze import add_analyze
from .cache import add_cache
from .compare import add_compare
from .demo import add_demo
from .fix import add_fix
from .mcp_command import add_mcp
from .report import add_report
from .run import add_loader, add_run


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchdoctor`` console script."""
    parser = build_parser()
    args = parser.parse_args(
        split_script_args(list(sys.argv[1:] if argv is None else argv), parser)
    )
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    # Until a run's supervisor takes them over, SIGTERM ends torchdoctor like Ctrl-C does: with
    # exit status 130 and, for `run`, a record saying the script never started.
    previous_term = _on_sigterm_interrupt()
    try:
        on_stdout = asks_for_stdout(args)
        if on_stdout is None:
            return handler(args)
        with record_on_stdout(args, on_stdout):
            return handler(args)
    except TorchdoctorError as exc:
        print_error(exc.message, exc.hint)
        return exc.exit_status
    except KeyboardInterrupt:
        print_error(INTERRUPTED)  # the status of a run stopped so
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_INTERNAL
    except Exception:  # noqa: BLE001 - the one boundary: a bug of ours, not the user's mistake
        # Every user-caused error is a TorchdoctorError (status 2 and its message, above); what
        # reaches here is torchdoctor's own failure. Without this it would exit 1, the status
        # of a script that raised.
        traceback.print_exc()
        print_error(
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


def split_script_args(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """Keep everything after the script (or ``-m MODULE``) away from torchdoctor's own options.

    ``torchdoctor run --steps 5 -- train.py --lr 0.1`` and ``torchdoctor run train.py --lr 0.1``
    both give the script ``--lr 0.1``. The tail is packed after ``--`` so argparse leaves it alone.
    Which options take a value (so that ``--steps 5`` does not make ``5`` the script) is read
    from ``parser`` itself: a flag added to the parser is known here with nothing else to edit.
    """
    commands = script_commands(parser)
    if not argv or argv[0] not in commands:
        return argv
    takes_value = commands[argv[0]]
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


def script_commands(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Subcommands that take a script after their options -> their option strings that take a value.

    A subcommand takes a script when it has a positional that swallows the rest of the line
    (``nargs=REMAINDER``, see :func:`._target.target_args`); an option takes a value unless its action
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


def print_error(message: str, hint: str | None = None) -> None:
    print(f"torchdoctor: error: {message}", file=sys.stderr)
    if hint:
        print(f"  fix: {hint}", file=sys.stderr)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_run,
    add_loader,
    add_fix,
    add_report,
    add_analyze,
    add_demo,
    add_compare,
    add_cache,
    add_mcp,
]
