"""The agents' server without the server: the root's path checks, the answers read from records,
`fix --apply-within`'s refusal, and the skill shipped in the package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paths import DATA
from torchdoctor.agents import OWN_DIR, SKILL, OutsideRoot, Root
from torchdoctor.agents import _summary as summary
from torchdoctor.patch._project import Project
from torchdoctor.patch.command import BACKUP_DIR, _outside


@pytest.fixture
def root(tmp_path) -> Root:
    folder = tmp_path / "root"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "train.py").write_text("print(1)\n")
    (tmp_path / "secret.py").write_text("print(2)\n")
    return Root(folder)


def test_paths_under_the_root_are_taken_relative_or_absolute(root):
    assert root.inside("sub/train.py", "script") == root.path / "sub" / "train.py"
    assert root.inside(str(root.path / "sub" / "train.py"), "script").name == "train.py"
    # a symlink that stays inside is fine
    (root.path / "alias.py").symlink_to(root.path / "sub" / "train.py")
    assert root.inside("alias.py", "script") == root.path / "sub" / "train.py"


@pytest.mark.parametrize("given", ["../secret.py", "SECRET", "sub/../../secret.py", "out.py"])
def test_a_path_leading_out_of_the_root_is_refused_naming_the_root(root, given):
    secret = root.path.parent / "secret.py"
    if given == "SECRET":
        given = str(secret)
    if given == "out.py":  # a symlink inside the root that leads out of it
        (root.path / "out.py").symlink_to(secret)
    with pytest.raises(OutsideRoot) as err:
        root.inside(given, "script")
    assert f"outside the server's root {root.path}" in err.value.message
    assert "--root" in (err.value.hint or "")


def test_a_missing_or_empty_path_is_said_so(root):
    with pytest.raises(OutsideRoot, match="no such file"):
        root.inside("sub/nothing.py", "script")
    with pytest.raises(OutsideRoot, match="no script given"):
        root.inside("  ", "script")
    assert root.inside("sub/new.json", "record", exists=False).name == "new.json"


def test_a_root_that_is_no_folder_is_a_usage_error(tmp_path):
    with pytest.raises(Exception, match="not a folder"):
        Root(tmp_path / "nowhere")


def test_what_the_server_writes_goes_under_its_own_ignored_folder(root):
    first = root.new_file("records", "train", ".json")
    second = root.new_file("records", "train", ".json")
    assert first != second and first.parent == root.path / OWN_DIR / "records"
    assert (root.path / OWN_DIR / ".gitignore").read_text() == "*\n"


def test_a_diagnosis_is_read_from_the_record_as_it_says_it():
    record = json.loads((DATA / "records" / "run_v2.json").read_text())
    said = summary.diagnosis(record, "run.json")
    assert said["verdict"]["kind"] == record["verdict"]["kind"]
    assert said["step_ms"] == record["step_ms"]["mean"]
    assert said["ceiling"]["speedup"] == record["ceiling_speedup"]
    assert [f["kind"] for f in said["findings"]] == [f["kind"] for f in record["findings"]]
    located = [f for f in record["findings"] if f.get("file") and f.get("line")]
    for f in located:
        assert f"{f['file']}:{f['line']}" in [x["where"] for x in said["findings"]]
    assert said["record"] == "run.json"


def test_a_patch_is_read_with_each_remedys_judgement_and_what_was_left_out():
    record = {
        "status": "complete",
        "ending": {"status": "complete", "exit_status": 0, "words": ""},
        "patch": {
            "root": "/p",
            "diff": "--- a/t.py\n+++ b/t.py\n",
            "judged": {"speedup": 2.0, "low": 1.8, "high": 2.2, "judgement": "IMPROVED"},
            "remedies": [
                {"key": "loader", "title": "workers", "kept": True, "because": "input",
                 "judged": {"speedup": 2.0, "low": 1.8, "high": 2.2, "judgement": "IMPROVED"},
                 "changes": [{"file": "t.py", "line": 3, "what": "num_workers=0 -> 4"}],
                 "skipped": [{"setting": "pin_memory", "reason": "no accelerator"}]},
                {"key": "syncs", "title": "assert", "kept": False, "numerics": True,
                 "checked_losses": 0, "reason": "other losses"},
            ],
        },
    }  # fmt: skip
    said = summary.patch(record, "fix.json")
    assert said["judged"]["low"] == 1.8 and said["diff"].startswith("--- a/t.py")
    kept, dropped = said["remedies"]
    assert kept["changes"] == ["t.py:3 num_workers=0 -> 4"]
    assert kept["left_out"] == ["pin_memory: no accelerator"]
    assert kept["numerics_checked_losses"] is None and dropped["numerics_checked_losses"] == 0
    assert not dropped["kept"] and dropped["reason"] == "other losses"


def test_apply_within_refuses_a_backup_or_file_outside_the_folder(tmp_path):
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    script = project / "sub" / "train.py"
    script.write_text("print(1)\n")
    within_project = Project(script, root=project)
    # the backup folder lies under the project's root: a folder below it cannot hold it
    assert _outside(within_project, [], str(project / "sub")) == str(project.resolve() / BACKUP_DIR)
    assert _outside(within_project, [], str(project)) is None
    assert _outside(within_project, [], str(tmp_path)) is None


def test_the_skill_is_in_the_package_and_the_docs_say_how_to_get_it():
    text = SKILL.read_text(encoding="utf-8")
    assert text.startswith("---\nname: torchdoctor\n")
    for tool in ("`diagnose`", "`fix`", "`compare`", "`analyze_trace`", "`report`"):
        assert tool in text, tool
    docs = (Path(__file__).resolve().parents[3] / "docs" / "agents.md").read_text()
    assert "torchdoctor mcp --skill" in docs


def test_a_loader_setting_without_a_line_is_at_the_line_that_built_the_loader():
    record = {
        "loader": {"created_at": "/p/train.py:96"},
        "findings": [
            {"kind": "loader.num_workers", "title": "num_workers=0 -> 4", "fix": "..."},
            {"kind": "loader.costly_transform", "title": "SlowResize", "fix": "..."},
            {"kind": "item", "title": ".item()", "fix": "...", "file": "/p/t.py", "line": 7},
        ],
    }
    where = [f["where"] for f in summary.findings(record)]
    assert where == ["/p/train.py:96", None, "/p/t.py:7"]


def test_a_null_byte_in_a_path_is_a_usage_error_not_a_crash(root):
    with pytest.raises(OutsideRoot, match="no null byte"):
        root.inside("sub/train.py\0", "script")


def test_a_command_that_died_without_its_record_says_how_it_ended():
    from torchdoctor.agents._calls import Finished

    killed = Finished(-9, "", ["torchdoctor: measuring steps (400 steps)", ""])
    words = killed.error_words()
    assert words.startswith("the torchdoctor command was ended by signal 9 without writing its")
    assert "measuring steps" in words
    usage = Finished(2, "", ["noise", "torchdoctor: error: no script given", "  fix: pass one"])
    assert usage.error_words() == "torchdoctor: error: no script given\n  fix: pass one"


def test_a_client_that_went_away_is_no_failure_of_the_server():
    pytest.importorskip("mcp")
    import anyio

    from torchdoctor.agents.server import _client_gone

    class Group(Exception):
        def __init__(self, *exceptions):
            self.exceptions = exceptions

    assert _client_gone(BrokenPipeError())
    assert _client_gone(Group(BrokenPipeError(), Group(anyio.ClosedResourceError())))
    assert not _client_gone(Group(BrokenPipeError(), ValueError("ours")))
    assert not _client_gone(KeyError("x"))


def test_a_diagnosis_tells_the_steps_memory_in_mb():
    mb = 2**20
    record = {
        "memory_split": {
            "parameters": 2 * mb, "gradients": 2 * mb, "optimizer_state": 4 * mb,
            "activations": 8 * mb, "peak": 20 * mb, "device": "cuda:0",
            "largest": [{"module": "layers.0", "type": "Block", "nbytes": 6 * mb}],
        }
    }  # fmt: skip
    said = summary.memory(record)
    assert said["activations_mb"] == 8.0 and said["peak_mb"] == 20.0
    assert said["temporaries_mb"] == 4.0 and said["largest"] == ["layers.0 (Block) 6.0 MiB"]
    assert summary.memory({}) is None
    cpu = summary.memory({"memory_split": {**record["memory_split"], "peak": None}})
    assert cpu["peak_mb"] is None and cpu["temporaries_mb"] is None
