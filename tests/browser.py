"""Pages opened in Debian's chromium (headless, driven by Playwright; no browser download)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def browser_view(path: Path, script: str | None = None) -> dict:
    """Open ``path`` in headless chromium at 1280 px: the ids of its sections, its text, console
    messages, every request the page made, and what ``script`` (a JS function of no argument)
    returns, under ``extra``."""
    return browser_views([(path, script)])[0]


def browser_views(pages: Sequence[tuple[Path, str | None]]) -> list[dict]:
    """:func:`browser_view` of each ``(path, script)``, in that order, each page in its own tab
    of one chromium: starting chromium takes seconds, a page a fraction of one, so a test module
    that looks at several pages opens them together (a module fixture)."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            return [_view(browser, path, script) for path, script in pages]
        finally:
            browser.close()


def _view(browser, path: Path, script: str | None) -> dict:
    page = browser.new_page(viewport={"width": 1280, "height": 800})  # a context of its own
    try:
        console, requests = [], []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(path.resolve().as_uri())
        ids = page.eval_on_selector_all("section[id]", "els => els.map(e => e.id)")
        text = page.inner_text("body")
        charts = page.eval_on_selector_all("svg.chart", "els => els.length")
        wide = page.evaluate("document.documentElement.scrollWidth")
        extra = page.evaluate(script) if script else None
    finally:
        page.close()
    return {"ids": ids, "text": text, "console": console, "requests": requests,
            "charts": charts, "width": wide, "extra": extra}  # fmt: skip


def assert_offline(view: dict, path: Path) -> None:
    """The page logged nothing, asked for nothing but itself and fits a laptop screen."""
    assert view["console"] == [], view["console"]
    assert view["requests"] == [path.resolve().as_uri()], "the page asked for something else"
    assert view["width"] <= 1280, "wider than a laptop screen"
