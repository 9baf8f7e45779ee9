"""`torchdoctor fix --apply` on a script with CRLF line endings and a latin-1 coding cookie (PEP 263),
as an editor on Windows or an old project leaves one: Python runs it, so fix must read it, and its
diff and the applied file must keep the file's own bytes (the run is shared with test_fix_command:
tests/shared_runs.py, ``applied_fix``)."""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import pytest

from shared_runs import LATIN1_COMMENT as COMMENT
from torchdoctor.record import RunRecord

pytestmark = pytest.mark.integration


@pytest.mark.timing
def test_fix_applies_to_a_crlf_latin1_script_and_keeps_its_bytes(applied_fix, tmp_path):
    project, original, out = applied_fix.project, applied_fix.original, applied_fix.fix
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    patch = RunRecord.load(project / "fix.json").patch
    assert patch is not None and patch.applied, patch
    assert (Path(patch.backup) / "train.py").read_bytes() == original
    applied = (project / "train.py").read_bytes()
    assert applied != original
    assert applied.count(b"\n") == applied.count(b"\r\n")  # still CRLF, every line
    assert COMMENT.replace("\n", "\r\n").encode("latin-1") in applied  # still latin-1
    diff = Path(patch.path).read_bytes()
    assert COMMENT.replace("\n", "\r\n").encode("latin-1") in diff  # context, as in the file
    # The diff, applied to the original with git and with patch, gives what --apply wrote.
    for tool in (["git", "apply", "-"], ["patch", "-p1", "-s"]):
        copy = tmp_path / f"copy-{tool[0]}"
        copy.mkdir()
        (copy / "train.py").write_bytes(original)
        done = subprocess.run(tool, cwd=copy, input=diff, capture_output=True, check=False)
        assert done.returncode == 0, (tool, done.stderr)
        assert (copy / "train.py").read_bytes() == applied
    # Every line the patch did not change is the original's, byte for byte (CRLF included).
    old, new = original.split(b"\n"), applied.split(b"\n")
    blocks = difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    changed = [old[i] for tag, i1, i2, _, _ in blocks if tag != "equal" for i in range(i1, i2)]
    assert 0 < len(changed) <= 3, changed  # the settings' own lines, nothing else
