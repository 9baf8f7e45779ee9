"""``torchdoctor mcp``: the diagnose → patch → verify loop as Model Context Protocol tools on stdio
(docs/agents.md). Built on the official ``mcp`` SDK (``pip install 'torchdoctor[mcp]'``).

Every tool runs the torchdoctor command an engineer would type, as a process of its own
(:mod:`._calls`), reads the JSON record it wrote and answers the parts an agent acts on
(:mod:`._summary`). Paths are checked against the root (:mod:`._root`); what the server writes
(records, diffs) goes under ``<root>/.torchdoctor/``. A user's mistake is a tool error in the
command's own words; the server itself never goes down with a call.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from .. import __version__
from .._errors import TorchdoctorError
from ..record.lever_names import TRIAL_NAMES
from . import _summary
from ._calls import Finished, command, run_command
from ._root import Root

#: A call's own bound, beyond the runs' (each bounded by max_seconds): seconds.
CALL_BOUND_S = 3600.0
#: A whole run (run --whole) has no bound on the command line; a tool call always has one.
WHOLE_DEFAULT_S = 600.0
#: Exit statuses after which a run has written its record (a usage error writes none).
WRITES_RECORD = frozenset({0, 1, 3, 4, 5, 6, 130})
#: ... and after which compare and analyze have.
OK = frozenset({0})
#: How a run's answer is read from its record, by command.
READERS = {"run": _summary.diagnosis, "fix": _summary.patch}

INSTRUCTIONS = (
    "torchdoctor measures where a PyTorch training script's step time goes and proves fixes by "
    "measuring them. Call `diagnose` on the script first; read its verdict, ceiling interval "
    "and findings; call `fix` for a measured patch, apply it, then `diagnose` again (or "
    "`compare` the two records) to verify. Figures are of this machine: never claim a GPU "
    "figure from a CPU run. The skill text: `torchdoctor mcp --skill`."
)


class Judged(BaseModel):
    """A speedup measured side by side: figure, 90% interval, the noise it had to clear."""

    speedup: float | None = Field(description="baseline step / changed step (>1 is faster)")
    low: float | None = Field(None, description="the 90% interval's low end")
    high: float | None = Field(None, description="the 90% interval's high end")
    allowance: float | None = Field(None, description="run-to-run change it had to clear")
    judgement: str | None = Field(None, description="IMPROVED, NO CHANGE, REGRESSED, UNCLEAR")
    why: str = ""


class Verdict(BaseModel):
    kind: str | None = Field(description="INPUT-BOUND, COMPUTE-BOUND, HOST-BOUND, ...")
    why: str
    next: str = Field(description="what to change, in words")
    firm: bool = Field(description="false: the machine's load could have decided it")
    shares: dict[str, float] = Field(description="share of the step by part")


class Ceiling(BaseModel):
    speedup: float = Field(description="the step as run / the step with data made free")
    low: float | None = None
    high: float | None = None


class FindingOut(BaseModel):
    kind: str
    severity: str
    title: str
    where: str | None = Field(description="file:line in the user's code")
    source: str = ""
    fix: str
    cost_ms: float | None = None


class TrialOut(BaseModel):
    name: str
    changed: str
    status: str
    reason: str = ""
    judged: Judged | None = None
    code: str = Field("", description="the code to paste")
    caveats: list[str] = []


class MemoryOut(BaseModel):
    parameters_mb: float
    gradients_mb: float
    optimizer_state_mb: float
    activations_mb: float = Field(description="saved for backward, each storage once")
    largest: list[str] = Field(description="blocks that saved the most: name (type) MB")
    peak_mb: float | None = Field(description="the device allocator's peak; null on the CPU")
    temporaries_mb: float | None


class Diagnosis(BaseModel):
    status: str = Field(description="how the run ended: complete, partial, timed-out, ...")
    exit_status: int | None
    words: str = ""
    verdict: Verdict | None
    ceiling: Ceiling | None
    step_ms: float | None = Field(description="mean measured step, ms")
    measured_steps: int | None
    findings: list[FindingOut]
    trials: list[TrialOut]
    memory: MemoryOut | None = Field(
        None, description="one watched step's memory by kind (docs/memory.md); null: not watched"
    )
    notes: list[str]
    output_tail: list[str] = Field(
        [],
        description="a run that did not complete: the last lines it printed on stderr (the "
        "script's traceback)",
    )
    record: str = Field(description="the JSON record's path (for compare and report)")


class RemedyOut(BaseModel):
    key: str
    title: str
    because: str
    kept: bool = Field(description="in the diff: measured faster, or same losses for a rewrite")
    reason: str = Field(description="why not kept")
    judged: Judged | None = None
    numerics_checked_losses: int | None = None
    rechecked: str = Field(
        default="",
        description="a rewrite's round-trip on the patched script: gone, or still found where",
    )
    caveat: str = ""
    changes: list[str] = Field(description="file:line and what changes there")
    left_out: list[str] = Field(description="settings the remedy asks for that were left out")


class PatchOut(BaseModel):
    status: str
    exit_status: int | None
    words: str = ""
    verdict: Verdict | None
    diff: str = Field(description="the unified diff of what measured faster (git apply takes it)")
    diff_path: str | None
    diff_root: str | None = Field(description="the folder the diff's paths are relative to")
    applied: bool
    backup: str | None
    judged: Judged | None = Field(description="the whole patch against the original")
    remedies: list[RemedyOut]
    notes: list[str]
    output_tail: list[str] = Field([], description="as diagnose's")
    record: str


class Comparison(BaseModel):
    kind: str = Field(description="IMPROVED, NO CHANGE, REGRESSED, or could not tell")
    speedup: float | None
    low: float | None
    high: float | None
    allowance: float | None
    measure: str
    a_step_ms: float | None
    b_step_ms: float | None
    like_for_like: bool
    differences: list[str]
    notes: list[str]
    comparison: str


class TraceAnalysis(BaseModel):
    status: str
    exit_status: int | None
    words: str = ""
    verdict: Verdict | None
    step_ms: float | None
    files: list[str]
    ranks: int
    findings: list[FindingOut]
    notes: list[str]
    record: str


Script = Annotated[str, Field(description="the training script, a path under the root")]
Args = Annotated[list[str] | None, Field(description="the script's own arguments")]
Steps = Annotated[
    int | None, Field(None, ge=1, strict=True, description="measured steps (default 20)")
]
Warmup = Annotated[int | None, Field(None, ge=0, strict=True, description="steps before measuring")]
Seconds = Annotated[
    float | None, Field(None, gt=0, description="wall-time bound of each run, seconds")
]


def build_server(root: Root) -> MCPServer:
    """The server, its tools bound to ``root``."""
    app = MCPServer(
        "torchdoctor", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )

    async def call(argv: list[str], ctx: Context | None = None, stdout: bool = False) -> Finished:
        """Run ``argv`` for a call: its phases as ``ctx``'s progress, its bound a tool error."""
        phases = itertools.count(1)

        async def progress(line: str) -> None:
            if ctx is not None:
                await ctx.report_progress(next(phases), None, line)

        try:
            return await run_command(argv, root.path, CALL_BOUND_S, progress, stdout=stdout)
        except TorchdoctorError as exc:
            raise _tool_error(exc) from None

    def record_of(done: Finished, path: Path, written: frozenset[int] = OK) -> dict[str, Any]:
        """The JSON ``done`` wrote at ``path``, where its exit status is one that writes it;
        else a tool error in the command's own words."""
        if done.returncode not in written or not path.exists():
            raise ToolError(done.error_words())
        return json.loads(path.read_text())

    async def run_script(
        subcommand: str,
        flags: list[str],
        script: Path,
        args: list[str] | None,
        record: Path,
        ctx: Context,
    ) -> dict[str, Any]:
        """``run`` or ``fix`` of ``script``, answered from its record: what the run said, and
        what it printed last when it did not complete."""
        argv = command(subcommand, *flags, "--json", str(record), "--", str(script), *(args or []))
        done = await call(argv, ctx)
        said = READERS[subcommand](record_of(done, record, WRITES_RECORD), str(record))
        return {**said, "output_tail": _tail(done, said)}

    def script_flags(steps: int | None, warmup: int | None, max_seconds: float | None) -> list[str]:
        flags = []
        if steps is not None:
            flags += ["--steps", str(steps)]
        if warmup is not None:
            flags += ["--warmup", str(warmup)]
        if max_seconds is not None:
            flags += ["--max-seconds", str(max_seconds)]
        return flags

    @app.tool(
        description="Run a training script for a bounded number of steps and say what bounds "
        "it (input, compute, host, communication), by how much, the lines that cause it and what "
        "to change. Optionally measure levers in its own loop (trials)."
    )
    async def diagnose(
        script: Script,
        ctx: Context,
        args: Args = None,
        steps: Steps = None,
        warmup: Warmup = None,
        whole: Annotated[
            bool, Field(description="watch the run to its own end instead (passive)")
        ] = False,
        trials: Annotated[
            list[str] | None, Field(description=f"levers to try: {', '.join(TRIAL_NAMES)}, all")
        ] = None,
        max_seconds: Seconds = None,
    ) -> Diagnosis:
        path = _checked(root, script, "script")
        record = root.new_file("records", path.stem, ".json")
        flags = script_flags(steps, warmup, max_seconds)
        if whole:
            flags.append("--whole")
            if max_seconds is None:
                flags += ["--max-seconds", str(WHOLE_DEFAULT_S)]
        if trials:
            flags += ["--try", ",".join(trials)]
        return Diagnosis(**await run_script("run", flags, path, args, record, ctx))

    @app.tool(
        description="Diagnose the script, write each measured remedy into its code as a unified "
        "diff, run the patched code against the original in alternation and keep only what "
        "measured faster (rewrites: what computes the same losses). apply=true also writes the "
        "patch into the files under the root (originals backed up)."
    )
    async def fix(
        script: Script,
        ctx: Context,
        args: Args = None,
        apply: Annotated[bool, Field(description="write the patch into the files")] = False,
        steps: Steps = None,
        warmup: Warmup = None,
        rounds: Annotated[
            int | None, Field(None, ge=1, strict=True, description="alternated rounds")
        ] = None,
        max_seconds: Seconds = None,
    ) -> PatchOut:
        path = _checked(root, script, "script")
        record = root.new_file("records", f"{path.stem}-fix", ".json")
        diff = root.new_file("patches", path.stem, ".diff")
        flags = script_flags(steps, warmup, max_seconds)
        if rounds is not None:
            flags += ["--rounds", str(rounds)]
        if apply:
            flags += ["--apply", "--apply-within", str(root.path)]
        flags += ["--out", str(diff)]
        return PatchOut(**await run_script("fix", flags, path, args, record, ctx))

    @app.tool(
        description="Did B get faster than A, beyond the noise? Two records written by "
        "diagnose (or analyze_trace), judged with an interval and the run-to-run allowance."
    )
    async def compare(
        a: Annotated[str, Field(description="the record before")],
        b: Annotated[str, Field(description="the record after")],
    ) -> Comparison:
        first, second = _checked(root, a, "record"), _checked(root, b, "record")
        out = root.new_file("records", "comparison", ".json")
        done = await call(command("compare", str(first), str(second), "--json", str(out)))
        return Comparison(**_summary.comparison(record_of(done, out), str(out)))

    @app.tool(
        description="Read torch.profiler traces (a .json or .json.gz file, or a folder of "
        "them, one per rank) and say what bounds the steps they recorded."
    )
    async def analyze_trace(
        trace: Annotated[str, Field(description="a trace file or folder under the root")],
        ctx: Context,
    ) -> TraceAnalysis:
        path = _checked(root, trace, "trace")
        record = root.new_file("records", f"{path.stem}-trace", ".json")
        done = await call(command("analyze", str(path), "--json", str(record)), ctx)
        return TraceAnalysis(**_summary.trace_analysis(record_of(done, record), str(record)))

    @app.tool(
        description="The text report of a record (diagnose's, fix's or analyze_trace's), as "
        "the terminal shows it."
    )
    async def report(record: Annotated[str, Field(description="a record under the root")]) -> str:
        path = _checked(root, record, "record")
        done = await call(command("report", str(path)), stdout=True)
        if done.returncode != 0:
            raise ToolError(done.error_words())
        return done.stdout

    return app


#: Lines of a run's stderr an answer carries when the run did not complete.
TAIL_SAID = 20


def _tail(done: Finished, said: dict[str, Any]) -> list[str]:
    if said["status"] == "complete":
        return []
    return [line for line in done.stderr_tail if line.strip()][-TAIL_SAID:]


def _checked(root: Root, path: str, what: str) -> Path:
    try:
        return root.inside(path, what)
    except TorchdoctorError as exc:
        raise _tool_error(exc) from None


def _tool_error(exc: TorchdoctorError) -> ToolError:
    words = exc.message + (f"\n  fix: {exc.hint}" if exc.hint else "")
    return ToolError(words)


#: What a client that went away leaves: the server's end of the pipes, closed or broken.
GONE = (BrokenPipeError, ConnectionResetError, EOFError)


def serve(root: Root) -> None:
    """Serve on stdio until the client closes it (or goes away: a broken pipe is its end, not
    a failure of the server's)."""
    try:
        build_server(root).run("stdio")
    except Exception as exc:  # noqa: BLE001 - told apart below
        if not _client_gone(exc):
            raise


def _client_gone(exc: BaseException) -> bool:
    """Whether ``exc`` (or every exception of a group) is the client's end of the pipes."""
    group = getattr(exc, "exceptions", None)
    if group:
        return all(_client_gone(e) for e in group)
    import anyio

    return isinstance(exc, (*GONE, anyio.BrokenResourceError, anyio.ClosedResourceError))
