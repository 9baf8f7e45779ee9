"""Files torchdoctor writes take the mode the user's umask gives (not mkstemp's 0600)."""

from __future__ import annotations

import os
import stat

import pytest

from torchdoctor.record import write_text_atomic


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_a_written_file_follows_the_umask(tmp_path, mask, mode):
    before = os.umask(mask)
    try:
        path = write_text_atomic(tmp_path / "r.json", "{}")
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_a_file_name_that_is_not_utf8_is_written_as_its_escapes(tmp_path):
    """`analyze --html` of a trace whose file name is not UTF-8 raised UnicodeEncodeError."""
    name = b"rank-\xff.json".decode("utf-8", "surrogateescape")
    path = write_text_atomic(tmp_path / "page.html", f"<p>{name}</p>")
    assert path.read_text(encoding="utf-8") == "<p>rank-\\udcff.json</p>"
