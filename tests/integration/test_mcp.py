"""`torchdoctor mcp` started as a real subprocess and driven over stdio by the MCP SDK's own client:
its tools and schemas, the closed loop (diagnose, fix with apply, diagnose again, compare), paths
outside the root refused, and a cancelled call that leaves no process behind."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from distjobs import tagged
from paths import DATA, HTA_TRACES, SCENARIOS
from shared_runs import SLOW_TRANSFORM_ARGS as INPUT_BOUND

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install -e '.[dev]')")

import anyio  # noqa: E402
import psutil  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

pytestmark = pytest.mark.integration

#: fix as test_fix_command runs it; the diagnoses a little longer, so that `compare` can judge
#: two of them (6 steps each, with workers starting, left it NO CHANGE within a 744% allowance)
QUICK = {"steps": 6, "warmup": 2}
DIAGNOSE = {"steps": 12, "warmup": 4}


def _server(root: Path) -> Client:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "torchdoctor", "mcp", "--root", str(root)]
    )
    return Client(params, read_timeout_seconds=600)


def _text(result) -> str:
    return " ".join(c.text for c in result.content if hasattr(c, "text"))


def test_the_tools_are_listed_with_their_schemas_and_the_skill_is_shipped(tmp_path):
    async def scenario():
        async with _server(tmp_path) as client:
            return (await client.list_tools()).tools

    tools = {t.name: t for t in anyio.run(scenario)}
    assert set(tools) == {"diagnose", "fix", "compare", "analyze_trace", "report"}
    diagnose = tools["diagnose"]
    assert diagnose.input_schema["required"] == ["script"]
    assert {"args", "steps", "warmup", "whole", "trials", "max_seconds"} <= set(
        diagnose.input_schema["properties"]
    )
    for name in ("verdict", "ceiling", "findings", "trials", "record"):
        assert name in diagnose.output_schema["properties"], name
    assert {"diff", "remedies", "judged", "applied"} <= set(
        tools["fix"].output_schema["properties"]
    )
    assert tools["fix"].input_schema["properties"]["apply"]["default"] is False
    skill = subprocess.run(
        [sys.executable, "-m", "torchdoctor", "mcp", "--skill"], capture_output=True, text=True
    )
    assert skill.returncode == 0 and skill.stdout.startswith("---\nname: torchdoctor\n")
    assert "never claim a gpu figure" in skill.stdout.lower()


def test_paths_outside_the_root_are_tool_errors_and_the_server_goes_on(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "secret.py"
    outside.write_text("print('not yours')\n")
    (root / "link.py").symlink_to(outside)
    shutil.copy(DATA / "records" / "run_v2.json", root / "run.json")
    (root / "raises.py").write_text("import torch\nraise ValueError('the data folder is empty')\n")

    async def scenario():
        async with _server(root) as client:
            said = {}
            for name, args in {
                "absolute": ("diagnose", {"script": str(outside)}),
                "dot-dot": ("diagnose", {"script": "../secret.py"}),
                "symlink": ("fix", {"script": "link.py"}),
                "record": ("compare", {"a": "run.json", "b": "/etc/hostname"}),
                "trace": ("analyze_trace", {"trace": str(HTA_TRACES)}),
                "missing": ("report", {"record": "nothing.json"}),
                "not a record": ("report", {"record": "link.py"}),
            }.items():
                said[name] = await client.call_tool(*args)
            said["report"] = await client.call_tool("report", {"record": "run.json"})
            said["raises"] = await client.call_tool("diagnose", {"script": "raises.py"})
            said["a bool for steps"] = await client.call_tool(
                "diagnose", {"script": "raises.py", "steps": True}
            )
            return said

    said = anyio.run(scenario)
    for name in ("absolute", "dot-dot", "symlink", "record", "trace"):
        assert said[name].is_error, name
        assert f"outside the server's root {root}" in _text(said[name]), _text(said[name])
    assert said["missing"].is_error and "no such file" in _text(said["missing"])
    # the command's own words, not a crash of the server
    words = _text(said["not a record"])
    assert said["not a record"].is_error and "fix:" in words and "Traceback" not in words, words
    assert not said["report"].is_error and "Verdict" in said["report"].structured_content["result"]
    assert not list(root.glob("*.diff")) and outside.read_text() == "print('not yours')\n"
    assert said["a bool for steps"].is_error  # no true taken for 1 step
    # a script that raises is no error of the call: the answer says how it ended, and why
    raised = said["raises"].structured_content
    assert not said["raises"].is_error and raised["status"] == "script-error", raised
    assert "ValueError: the data folder is empty" in raised["output_tail"], raised["output_tail"]


def test_a_cancelled_call_ends_the_script_and_leaves_no_process(tmp_path):
    shutil.copy(SCENARIOS / "train_loop.py", tmp_path / "train.py")
    tag = uuid.uuid4().hex
    args = ["--getitem-ms", "200", "--workers", "2", "--tag", tag]

    async def scenario():
        async with _server(tmp_path) as client:
            measuring = anyio.Event()
            lines: list[str] = []

            async def progress(done, total, message):
                lines.append(message or "")
                if "measuring" in (message or ""):
                    measuring.set()

            async with anyio.create_task_group() as group:

                async def call():
                    await client.call_tool(
                        "diagnose",
                        {"script": "train.py", "args": args, "steps": 500},
                        progress_callback=progress,
                    )

                group.start_soon(call)
                with anyio.fail_after(120):
                    await measuring.wait()
                started = tagged(tag)
                group.cancel_scope.cancel()
            # the server ends the run within its grace; the session stays open meanwhile
            deadline = time.monotonic() + 60
            while tagged(tag) and time.monotonic() < deadline:
                await anyio.sleep(0.5)
            left = tagged(tag)
            tools = (await client.list_tools()).tools
            return lines, started, left, tools

    lines, started, left, tools = anyio.run(scenario)
    assert any("measuring" in line for line in lines), lines  # progress came while it ran
    assert started, "the script was not running when the call was cancelled"
    assert left == [], f"processes left after the cancelled call: {left}"
    assert len(tools) == 5  # the server outlived the cancelled call


@pytest.fixture(scope="module")
def closed_loop(tmp_path_factory):
    """One agent's loop on an input-bound script: diagnose, fix with apply, diagnose the patched
    script, compare the two records; every answer kept for the tests below."""
    root = tmp_path_factory.mktemp("agent")
    shutil.copy(SCENARIOS / "train_loop.py", root / "train.py")
    original = (root / "train.py").read_text()

    async def scenario():
        async with _server(root) as client:
            steps = {}
            steps["before"] = await client.call_tool(
                "diagnose", {"script": "train.py", "args": INPUT_BOUND, **DIAGNOSE}
            )
            steps["fix"] = await client.call_tool(
                "fix", {"script": "train.py", "args": INPUT_BOUND, "apply": True, **QUICK}
            )
            steps["after"] = await client.call_tool(
                "diagnose", {"script": "train.py", "args": INPUT_BOUND, **DIAGNOSE}
            )
            steps["compare"] = await client.call_tool(
                "compare",
                {
                    "a": steps["before"].structured_content["record"],
                    "b": steps["after"].structured_content["record"],
                },
            )
            return steps

    steps = anyio.run(scenario)
    for name, result in steps.items():
        assert not result.is_error, (name, _text(result))
    return root, original, {k: v.structured_content for k, v in steps.items()}


@pytest.mark.timing
def test_diagnose_names_the_input_bound_and_its_lines(closed_loop):
    root, _, steps = closed_loop
    before = steps["before"]
    assert before["status"] == "complete" and before["exit_status"] == 0
    assert before["verdict"]["kind"] == "INPUT-BOUND", before["verdict"]
    assert before["ceiling"]["speedup"] > 1.5 and before["ceiling"]["low"] is not None
    where = [f["where"] for f in before["findings"] if f["where"]]
    assert any(w.startswith(f"{root / 'train.py'}:") for w in where), before["findings"]
    record = Path(before["record"])
    assert record.parent == root / ".torchdoctor" / "records"
    assert json.loads(record.read_text())["verdict"]["kind"] == "INPUT-BOUND"


@pytest.mark.timing
def test_fix_applies_what_measured_faster_and_its_diff_is_what_it_wrote(closed_loop, tmp_path):
    root, original, steps = closed_loop
    fix = steps["fix"]
    assert fix["judged"]["judgement"] == "IMPROVED", fix["judged"]
    kept = [r for r in fix["remedies"] if r["kept"]]
    assert kept and all(r["judged"]["low"] is not None for r in kept if r["judged"]), kept
    assert fix["applied"] and Path(fix["backup"]).is_relative_to(root)
    assert (Path(fix["backup"]) / "train.py").read_text() == original
    # the diff the agent is handed applies to the original with git, and gives the applied file
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "train.py").write_text(original)
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    check = subprocess.run(
        ["git", "apply", "--check", "-"], cwd=copy, input=fix["diff"], text=True,
        capture_output=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    subprocess.run(["git", "apply", "-"], cwd=copy, input=fix["diff"], text=True, check=True)
    assert (copy / "train.py").read_text() == (root / "train.py").read_text() != original
    assert Path(fix["diff_path"]).parent == root / ".torchdoctor" / "patches"


@pytest.mark.timing
def test_the_patched_script_diagnosed_again_compares_improved(closed_loop):
    _, _, steps = closed_loop
    assert steps["after"]["verdict"]["kind"] != "INPUT-BOUND" or (
        steps["after"]["step_ms"] < steps["before"]["step_ms"]
    )
    comparison = steps["compare"]
    assert comparison["kind"] == "IMPROVED", comparison
    assert comparison["low"] > 1.0 and comparison["like_for_like"], comparison


#: A script that starts a helper in a session of its own (a logger's uploader, `nohup`), which
#: keeps the stdout and stderr it inherited open long after the script ends.
DETACHES = """
import subprocess, sys, time
import torch
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{tag}"],
                 start_new_session=True)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(40):
    loss = model(torch.randn(8, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_helper_the_script_detached_does_not_hold_the_call(tmp_path):
    tag = uuid.uuid4().hex
    (tmp_path / "train.py").write_text(DETACHES.format(tag=tag))

    async def scenario():
        async with _server(tmp_path) as client:
            # the helper lives 300 s; the call must not wait for it (it took 46 s for a 45 s one)
            with anyio.move_on_after(150) as waited:
                result = await client.call_tool(
                    "diagnose", {"script": "train.py", "steps": 3, "warmup": 1}
                )
            return None if waited.cancelled_caught else result

    try:
        result = anyio.run(scenario)
    finally:
        for pid in tagged(tag):  # the helper is the script's, not the server's: end it here
            psutil.Process(pid).kill()
    assert result is not None, "the call waited for the detached helper's pipes"
    assert not result.is_error and result.structured_content["status"] == "complete"
