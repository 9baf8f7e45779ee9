"""`torchdoctor fix --apply` on a script with CRLF line endings and a latin-1 coding cookie (PEP 263),
as an editor on Windows or an old project leaves one: Python runs it, so fix must read it, and its
diff and the applied file must keep the file's own bytes."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from paths import SCENARIOS
from torchdoctor.record import RunRecord

pytestmark = pytest.mark.integration

#: A comment in latin-1 bytes (UTF-8 cannot decode them) just above the option whose default the
#: fix edits (the DataLoader's ``num_workers=args.workers``), so the diff's context carries it.
COMMENT = "# le chargeur: données décodées à la volée\n"
WORKERS = 'parser.add_argument("--workers"'


def _crlf_latin1_script(folder: Path) -> bytes:
    text = (SCENARIOS / "train_loop.py").read_text()
    text = "# -*- coding: latin-1 -*-\n" + text.replace(WORKERS, COMMENT + WORKERS, 1)
    data = text.replace("\n", "\r\n").encode("latin-1")
    (folder / "train.py").write_bytes(data)
    return data


@pytest.mark.timing
def test_fix_applies_to_a_crlf_latin1_script_and_keeps_its_bytes(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    original = _crlf_latin1_script(project)
    out = subprocess.run(
        [sys.executable, "-m", "torchdoctor", "fix", "--steps", "6", "--warmup", "2", "--quiet",
         "--json", "fix.json", "--apply", "--", "train.py", "--transform-ms", "12",
         "--dataset-len", "96"],
        cwd=project, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
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
