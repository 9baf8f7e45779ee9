"""That a diff ``torchdoctor fix`` writes applies with ``git apply`` and ``patch -p1``."""

from __future__ import annotations

import shutil
import subprocess

from torchdoctor.patch import Project


def assert_applies(project: Project, diff: str | bytes, remedies=("loader", "threads")) -> None:
    """The diff applies to a copy of the project with git and with patch, to the same bytes as
    the patched files (their own encoding and line endings). A text diff is taken as UTF-8."""
    assert diff
    data = diff.encode("utf-8") if isinstance(diff, str) else diff
    for tool in (["git", "apply", "--whitespace=nowarn", "-"], ["patch", "-p1", "-s"]):
        copy = project.root.parent / f"copy-{tool[0]}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(project.root, copy)
        out = subprocess.run(tool, cwd=copy, input=data, capture_output=True)
        assert out.returncode == 0, (tool, out.stdout, out.stderr, diff)
        for path, text in project.rendered(remedies).items():
            assert (copy / project.rel(path)).read_bytes() == project.files[path].encoded(text)
