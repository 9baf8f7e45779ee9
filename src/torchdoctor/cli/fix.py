"""``torchdoctor fix``: diagnose, write the measured remedies as a patch, measure it (docs/fix.md)."""

from __future__ import annotations

import argparse

from .._errors import TorchdoctorError
from .._paths import check_output_file, existing_dir
from ..options import add_flags, from_args, positive_int
from ._target import checked_outputs, parse_target, target_args


def add_fix(sub: argparse._SubParsersAction) -> None:
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
        "--apply-within",
        metavar="DIR",
        help="with --apply: write only when every file the patch changes (and its backup folder) "
        "lies under DIR, symlinks followed; otherwise change nothing and say which file does not",
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=2,
        help="rounds of alternated runs (original, each remedy, the whole patch) (default "
        "%(default)s)",
    )
    target_args(p)
    p.set_defaults(handler=_cmd_fix, loader_doctor="auto", max_seconds=None)


def _cmd_fix(args: argparse.Namespace) -> int:
    from ..patch import check_patchable, fix_cli
    from ..process import resolve_target

    if args.fix:
        raise TorchdoctorError("fix always measures its patch: --fix is `run`'s", "leave out --fix")
    if args.whole:
        raise TorchdoctorError(
            "fix runs the script for a bounded number of steps: --whole is `run`'s",
            "leave out --whole",
        )
    target = parse_target(args.target)
    check_patchable(resolve_target(target))
    out = check_output_file(args.out, "--out", example="fix.diff")
    options = from_args(args, **checked_outputs(args))
    within = (
        str(existing_dir(args.apply_within, "--apply-within", "name an existing folder"))
        if args.apply_within
        else None
    )
    if within is not None and not args.apply:
        raise TorchdoctorError("--apply-within limits --apply", "add --apply, or leave it out")
    return fix_cli(
        target, options, out=out, apply=args.apply, rounds=args.rounds, apply_within=within
    )
