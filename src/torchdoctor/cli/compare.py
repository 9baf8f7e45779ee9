"""``torchdoctor compare A.json B.json``: did B get faster, beyond the noise (docs/report.md)."""

from __future__ import annotations

import argparse

from .._errors import TorchdoctorError
from .._paths import check_output_file, where


def add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help=(
            "compare two records: IMPROVED, REGRESSED or NO CHANGE, judged against the noise "
            "(UNCLEAR when the machine's load differed between them and explains it)"
        ),
        description=(
            "Compare record B with record A (from `run --json` or `analyze --json`): the "
            "speedup of the mean step (samples/s when batch sizes differ) with a 90% "
            "bootstrap interval from the per-step times, and each part's change."
        ),
    )
    p.add_argument("a", metavar="A.json", help="the record before")
    p.add_argument("b", metavar="B.json", help="the record after")
    p.add_argument("--json", metavar="PATH", help="write the comparison as JSON to PATH")
    p.add_argument(
        "--html", metavar="PATH", help="write a page with the judgement and both records"
    )
    p.set_defaults(handler=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    from ..analysis.compare import CompareError, compare
    from ..record import RecordError, RunRecord, write_json_atomic
    from ..report.compare import render_comparison, write_comparison_html

    for path, flag in ((args.json, "--json"), (args.html, "--html")):
        if path is not None:
            check_output_file(path, flag)
    records = []
    for path in (args.a, args.b):
        try:
            records.append(RunRecord.load(path))
        except RecordError as exc:
            raise TorchdoctorError(
                str(exc), "pass files written by `torchdoctor run --json` or `analyze --json`"
            ) from None
    a, b = records
    try:
        result = compare(a, b)
    except CompareError as exc:
        raise TorchdoctorError(str(exc), "compare records of runs that measured steps") from None
    # the files first: a reader that closes the pipe early (`| head`) must not lose them
    if args.json:
        write_json_atomic(args.json, result.to_dict())
    if args.html:
        write_comparison_html(result, a, b, args.html)
    render_comparison(result)
    if args.json:
        print(f"comparison written to {where(args.json)}")
    if args.html:
        print(f"HTML report written to {args.html}")
    return 0
