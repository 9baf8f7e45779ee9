"""What `run`, `loader` and `fix` share: the script after the options, and the outputs checked
before the script runs."""

from __future__ import annotations

import argparse

from .._errors import TorchdoctorError
from .._paths import check_output_dir, check_output_file


def target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        metavar="-- SCRIPT [ARGS...] | -m MODULE [ARGS...]",
        help="the training script (run as __main__ with its own arguments), or -m MODULE",
    )


def checked_outputs(args: argparse.Namespace) -> dict[str, str]:
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


def parse_target(rest: list[str]):
    from ..process import Target

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
