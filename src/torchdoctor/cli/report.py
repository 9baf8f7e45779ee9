"""``torchdoctor report RUN.json``: a saved record rendered again, in the terminal or as a page."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .._errors import TorchdoctorError
from .._paths import check_output_file

if TYPE_CHECKING:
    from ..record import RunRecord


def add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="re-render a saved run record (JSON) without re-running")
    p.add_argument("path", help="a record written by `torchdoctor run --json PATH`")
    p.add_argument(
        "--html", metavar="PATH", help="write it as one self-contained HTML page to PATH instead"
    )
    p.add_argument(
        "--link",
        metavar="NAME|GBPS:US",
        help="a job's step projected to more ranks on this link: nvlink, infiniband (the "
        "default), ethernet, or bandwidth per rank in Gb/s and latency in µs, e.g. 200:8 "
        "(docs/distributed.md)",
    )
    p.set_defaults(handler=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from ..record import RecordError, RunRecord
    from ..report.terminal import render

    try:
        record = RunRecord.load(args.path)
    except RecordError as exc:
        raise TorchdoctorError(
            str(exc), "pass a file written by `torchdoctor run --json`"
        ) from None
    from ..analysis.compare import impossible_steps, step_times

    bad = impossible_steps(step_times(record))
    if bad:
        raise TorchdoctorError(
            f"{args.path}: the record has {bad}",
            "re-run the diagnosis with --json; report and compare only records of measured runs",
        )
    if args.link is not None:
        _reproject(record, args.link)
    if args.html is not None:
        check_output_file(args.html, "--html", example="run.html")
    try:
        if args.html is not None:
            from ..report.html import write_html

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


def _reproject(record: RunRecord, text: str) -> None:
    """``--link``: the job's projection again, on the link given."""
    from ..analysis.projection import parse_link, project

    try:
        link = parse_link(text)
    except ValueError as exc:
        raise TorchdoctorError(str(exc), "e.g. --link ethernet, or --link 200:8") from None
    job = record.distributed
    if job is None:
        raise TorchdoctorError(
            "--link: this record is not a distributed job's",
            "pass a record of `torchdoctor run --nproc-per-node N --json PATH`",
        )
    job.projection = project(record, link)
