"""``torchdoctor demo``: a built-in slow script diagnosed, fixed and measured (``runner``), with
the script it runs as written (``scenarios/demo_train.py``)."""

from __future__ import annotations

import argparse

from ..._paths import check_output_dir, check_output_file
from ...options import positive_int


def add_demo(sub: argparse._SubParsersAction) -> None:
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
    from .runner import run_demo

    for path, flag in ((args.json, "--json"), (args.workdir, "--workdir")):
        if path is not None:
            check_output_dir(path, flag)
    html = check_output_file(args.html, "--html", example="demo.html")
    return run_demo(json_dir=args.json, steps=args.steps, workdir=args.workdir, html=html)
