"""Patches of files as Python reads them: a CRLF file, one with a PEP 263 coding cookie (latin-1),
one with a UTF-8 BOM. Each is read, the diff carries the file's own bytes (``git apply`` and
``patch -p1`` take it) and the patched file differs from the original only on the changed line."""

from __future__ import annotations

from pathlib import Path

from diffs import assert_applies
from torchdoctor.patch import Project, plan_loader, plan_threads

TRAIN = (
    "import torch\n"
    "from torch.utils.data import DataLoader, TensorDataset\n"
    "ds = TensorDataset(torch.zeros(8, 2))\n"
    "loader = DataLoader(ds, batch_size=4, num_workers=0)  # no workers yet\n"
    "for (x,) in loader:\n"
    "    pass\n"
)
#: A cookie, and a comment beside the changed line in latin-1 bytes, which UTF-8 cannot decode.
LATIN = "# -*- coding: latin-1 -*-\n" + TRAIN.replace(
    "loader =", "# données mises en mémoire, café\nloader ="
)


def _project(tmp_path: Path, data: bytes) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_bytes(data)
    return Project(root / "train.py", root=root)


def _plan_workers(project: Project, line: int) -> None:
    remedy = plan_loader(project, f"{project.script}:{line}", {"num_workers": 2}, [], "sweep")
    assert [c.what for c in remedy.changes] == ["num_workers=0 → 2"], remedy.skipped


def _only_line_changed(before: bytes, after: bytes, line: int) -> None:
    old, new = before.split(b"\n"), after.split(b"\n")
    assert len(old) == len(new)
    assert [i + 1 for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b] == [line]


def test_a_crlf_file_keeps_its_line_endings_in_the_diff_and_the_patched_file(tmp_path):
    data = TRAIN.replace("\n", "\r\n").encode()
    project = _project(tmp_path, data)
    _plan_workers(project, 4)
    after = project.patched({"loader"})[project.script]
    _only_line_changed(data, after, 4)
    assert after.count(b"\n") == after.count(b"\r\n") == data.count(b"\r\n")
    diff = project.diff_bytes({"loader"})
    # (its comment named what was added: left out)
    assert b"+loader = DataLoader(ds, batch_size=4, num_workers=2)\r\n" in diff
    assert b" import torch\r\n" in diff  # context lines as the file has them
    assert_applies(project, diff, remedies=("loader",))


def test_a_line_added_to_a_crlf_file_ends_as_its_lines_do(tmp_path):
    data = TRAIN.replace("\n", "\r\n").encode()
    project = _project(tmp_path, data)
    plan_threads(project, 2, [], "sweep")
    after = project.patched({"threads"})[project.script]
    assert b"torch.set_num_threads(2)\r\n" in after
    assert after.count(b"\n") == after.count(b"\r\n")
    assert_applies(project, project.diff_bytes({"threads"}), remedies=("threads",))


def test_a_latin1_file_with_a_coding_cookie_is_patched_in_latin1(tmp_path):
    data = LATIN.encode("latin-1")
    project = _project(tmp_path, data)
    _plan_workers(project, 6)
    after = project.patched({"loader"})[project.script]
    _only_line_changed(data, after, 6)
    assert after.decode("latin-1").startswith(LATIN[:60])
    diff = project.diff_bytes({"loader"})
    assert "# données mises en mémoire, café\n".encode("latin-1") in diff  # context, its bytes
    assert "données" in project.diff({"loader"})  # the record's text reads it
    assert_applies(project, diff, remedies=("loader",))


def test_a_bom_stays_at_the_start_of_the_file_and_of_its_diff(tmp_path):
    data = b"\xef\xbb\xbf" + TRAIN.encode()
    project = _project(tmp_path, data)
    _plan_workers(project, 4)
    after = project.patched({"loader"})[project.script]
    assert after.startswith(b"\xef\xbb\xbfimport torch\n")
    _only_line_changed(data, after, 4)
    assert_applies(project, project.diff_bytes({"loader"}), remedies=("loader",))
