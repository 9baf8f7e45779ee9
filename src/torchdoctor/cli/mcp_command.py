"""``torchdoctor mcp``: the diagnose → patch → verify loop as MCP tools on stdio (docs/agents.md)."""

from __future__ import annotations

import argparse
import os


def add_mcp(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mcp",
        help="serve the diagnose, fix, compare, analyze and report tools to coding agents (MCP)",
        description=(
            "A Model Context Protocol server on stdio (for an agent's MCP configuration): tools "
            "diagnose, fix, compare, analyze_trace and report, each running the torchdoctor "
            "command on scripts, traces and records under --root. Needs the mcp package: "
            "pip install 'torchdoctor[mcp]'."
        ),
    )
    p.add_argument(
        "--root",
        metavar="DIR",
        default=os.curdir,
        help="the only folder the tools read and write under (default: the working directory)",
    )
    p.add_argument(
        "--skill", action="store_true", help="print the skill for agents (SKILL.md) and exit"
    )
    p.set_defaults(handler=_cmd_mcp)


def _cmd_mcp(args: argparse.Namespace) -> int:
    from .._optional import require
    from ..agents import SKILL, Root

    if args.skill:
        print(SKILL.read_text(encoding="utf-8"), end="")
        return 0
    root = Root(args.root)
    require("mcp", "torchdoctor mcp")
    from ..agents.server import serve

    serve(root)
    return 0
