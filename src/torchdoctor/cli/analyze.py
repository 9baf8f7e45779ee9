"""``torchdoctor analyze TRACE...``: what bounds a run, from its torch.profiler traces."""

from __future__ import annotations

import argparse

from .._paths import check_output_file


def add_analyze(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument(
        "--jobs",
        type=_jobs,
        metavar="N",
        help="processes analysing a folder's rank files at once (default: one per usable core, "
        "as many as the memory available holds; 1 analyses them one by one in this process)",
    )
    p.set_defaults(handler=_cmd_analyze)


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (1 or more)")
    return n


def _cmd_analyze(args: argparse.Namespace) -> int:
    from ..analysis.trace_analysis import analyze_trace
    from ..report.trace_terminal import render_trace_report

    if args.json is not None:
        check_output_file(args.json, "--json", example="analysis.json")
    if args.html is not None:
        check_output_file(args.html, "--html", example="analysis.html")
    record = analyze_trace(
        args.traces,
        include_last_step=args.include_last_step,
        command=["torchdoctor", "analyze", *args.traces],
        jobs=args.jobs,
    )
    render_trace_report(record)
    if args.json:
        record.save(args.json)
    if args.html:
        from ..report.html import write_html

        write_html(record, args.html)
        print(f"HTML report written to {args.html}")
    return 0
