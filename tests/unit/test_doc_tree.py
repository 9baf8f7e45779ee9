"""docs/architecture.md names every module that exists, so the map a newcomer reads is the tree.

It had fallen behind (seven report modules, ``patch/command``, the process package's parent and
child sides were missing); this fails with the name of each module it lacks.
"""

from __future__ import annotations

import re
from pathlib import Path

import torchdoctor

SRC = Path(torchdoctor.__file__).resolve().parent
DOC = SRC.parents[1] / "docs" / "architecture.md"


def _forms(rel: str) -> list[str]:
    """How the doc may name the module at ``rel`` (``capture/_session.py``): its path, with or
    without ``.py``, or its dotted name; a package by its folder (``capture/``) or dotted name; a
    loose module at the top by its file name or its name in backticks."""
    if "/" not in rel:
        return [rel, f"`{rel[:-3]}`"]
    if rel.endswith("/__init__.py"):
        package = rel[: -len("/__init__.py")]
        dotted = package.replace("/", ".")
        # A bare word (``report``) is not a name: a package's is its folder or a dotted path.
        return [rel, f"{package}/", dotted if "." in dotted else f"torchdoctor.{dotted}"]
    return [rel, rel[:-3], rel[:-3].replace("/", ".")]


def _named(form: str, text: str) -> bool:
    # Not a piece of a longer name: `report/trace` is not `report/trace_html`, nor is
    # `analysis.trials` inside `other.analysis.trials` (a `torchdoctor.` prefix is allowed).
    pattern = r"(?<![\w/.])(?:torchdoctor[./])?" + re.escape(form) + r"(?![\w])"
    return re.search(pattern, text) is not None


def missing_modules(text: str, root: Path = SRC) -> list[str]:
    """Modules under ``root`` that ``text`` does not name, as paths relative to it."""
    modules = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    return [rel for rel in modules if not any(_named(form, text) for form in _forms(rel))]


def test_the_architecture_doc_names_every_module():
    missing = missing_modules(DOC.read_text(encoding="utf-8"))
    assert not missing, (
        "docs/architecture.md does not name these modules (add each to 'The tree, module by "
        "module'):\n" + "\n".join(missing)
    )


def test_the_check_tells_a_named_module_from_a_longer_name(tmp_path):
    # The check itself can fail: a module is missing unless one of its names stands alone.
    for rel in ("report/trace_html.py", "report/html.py", "analysis/trials.py", "_errors.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "report" / "__init__.py").write_text("")
    text = "`report/trace_html.py` draws; see torchdoctor.analysis.trialsx and `_errors`."
    assert missing_modules(text, tmp_path) == [
        "analysis/trials.py",
        "report/__init__.py",
        "report/html.py",
    ]
    text += " The page is report.html, in `report/`; analysis/trials judges."
    assert missing_modules(text, tmp_path) == []
