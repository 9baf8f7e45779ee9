"""The fix section of the terminal report and of the page, from a record with a patch."""

from __future__ import annotations

from rich.console import Console

from torchdoctor.record import JudgedSpeedup, Patch, PatchChange, PatchRemedy, PatchSkip, RunRecord
from torchdoctor.report.html import render_html
from torchdoctor.report.terminal import render


def _record() -> RunRecord:
    record = RunRecord()
    record.patch = Patch(
        root="/proj",
        path="/proj/fix.diff",
        diff="--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-x = DataLoader(d, a<b)\n+x = DataLoader(d, a<b, num_workers=2)\n",
        remedies=[
            PatchRemedy(
                "loader", "DataLoader settings", "the sweep picked 2 workers",
                changes=[PatchChange("t.py", 1, "num_workers=2 added")],
                skipped=[PatchSkip("pin_memory", "pin_memory is computed (flag()): make it True")],
                judged=JudgedSpeedup(2.0, 1.8, 2.2, 0.1, "IMPROVED"), kept=True,
            ),
            PatchRemedy(
                "threads", "torch threads", "the sweep picked 1 thread",
                changes=[PatchChange("t.py", 1, "torch.set_num_threads(1) added after the imports")],
                judged=JudgedSpeedup(1.02, 0.97, 1.07, 0.1, "NO CHANGE"),
                reason="measured 1.02x (0.97–1.07): not faster beyond the 10% two runs of one "
                "script may differ by",
            ),
        ],
        judged=JudgedSpeedup(2.0, 1.8, 2.2, 0.1, "IMPROVED"), before_ms=20.0, after_ms=10.0,
        rounds=2,
    )  # fmt: skip
    return record


def test_the_terminal_says_what_is_kept_dropped_and_left_out():
    console = Console(width=200, record=True)
    render(_record(), console)
    text = "\n".join(line.strip("│ ") for line in console.export_text().splitlines())
    assert "DataLoader settings\n2.00x (1.80–2.20) · kept in the patch" in text
    assert "t.py:1  num_workers=2 added" in text
    assert "left out: pin_memory: pin_memory is computed (flag()): make it True" in text
    assert "torch threads\n1.02x (0.97–1.07) · dropped: measured 1.02x" in text
    assert (
        "The patch: 2.00x (1.80–2.20), mean step 20.0 → 10.0 ms over 2 alternated rounds." in text
    )


def test_a_patch_no_faster_says_so_before_its_figure():
    from torchdoctor.report.patch import whole_lines

    patch = _record().patch
    patch.judged = JudgedSpeedup(0.33, 0.2, 1.6, 0.1, "NO CHANGE")
    assert whole_lines(patch)[0] == (
        "The patch: no faster beyond the noise on this device (measured 0.33x (0.20–1.60), "
        "mean step 20.0 → 10.0 ms over 2 alternated rounds).",
        False,
    )
    patch.judged = JudgedSpeedup(0.5, 0.4, 0.6, 0.1, "REGRESSED")
    assert whole_lines(patch)[0][0].startswith("The patch: slower on this device (measured 0.50x")


def test_the_page_shows_the_diff_escaped_and_coloured():
    page = render_html(_record())
    section = page[page.index('<section id="patch">') :]
    assert "<span class='add'>+x = DataLoader(d, a&lt;b, num_workers=2)</span>" in section
    assert "<span class='del'>-x = DataLoader(d, a&lt;b)</span>" in section
    assert (
        "<span class='good'>kept</span>" in section and "dropped</span> measured 1.02x" in section
    )
    assert "git apply /proj/fix.diff" in section


def test_the_apply_commands_run_as_pasted_from_a_folder_with_a_space(tmp_path):
    import shlex
    import subprocess

    from torchdoctor.report.patch import patch_lines

    root = tmp_path / "my project"
    root.mkdir()
    (root / "train.py").write_text("x = 1\n")
    diff = root / "fix it.diff"
    diff.write_text("--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    (line,) = patch_lines(Patch(root=str(root), path=str(diff)))
    command = line.split("(apply it: ", 1)[1].split(", or ", 1)[0]
    assert command == f"cd {shlex.quote(str(root))} && git apply {shlex.quote(str(diff))}"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (root / "train.py").read_text() == "x = 2\n"
