"""The charts read: in a real chromium at 1280 px, no text of a chart overlaps another text of it
(a tick, a value, a unit, a legend) or one of its bars, and the num_workers sweep draws one line
per thread setting with one pick."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from browser import assert_offline, browser_views
from jobgen import rank_record
from paths import DATA, HTA_TRACES
from torchdoctor.analysis.distributed import combine
from torchdoctor.analysis.trace_analysis import analyze_trace
from torchdoctor.record import RunRecord, SweepPoint, TransformCost
from torchdoctor.report.html import write_html

pytestmark = pytest.mark.integration

#: Every pair of a chart's texts, or of a text and a bar or dot, whose boxes overlap (by more
#: than half a pixel each way), named by what they say; and each chart's lines and picks.
OVERLAPS = """() => [...document.querySelectorAll('svg.chart')].map(svg => {
  const box = e => e.getBoundingClientRect();
  const name = e => e.tagName === 'text' ? e.firstChild.textContent
    : e.tagName + ':' + (e.querySelector('title') || {}).textContent;
  const texts = [...svg.querySelectorAll('text')];
  const shapes = [...svg.querySelectorAll('rect, circle')];
  const hit = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5
    && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5;
  const out = [];
  texts.forEach((t, i) => {
    texts.slice(i + 1).forEach(u => { if (hit(box(t), box(u))) out.push([name(t), name(u)]); });
    shapes.forEach(s => { if (hit(box(t), box(s))) out.push([name(t), name(s)]); });
    const r = box(t), chart = box(svg);
    if (r.left < chart.left - 0.5 || r.right > chart.right + 0.5) out.push([name(t), 'edge']);
  });
  return {section: svg.closest('section').id, overlaps: out,
          lines: svg.querySelectorAll('path').length,
          picks: svg.querySelectorAll('circle.pick').length};
})"""
#: A transform name as long as the one the issue saw run into its value.
LONG = "'manual_seed' of 'torch._C.Generator' objects"


def _run_with_a_thread_sweep() -> RunRecord:
    """A run whose whole-step sweep searched workers with 1 and 2 torch threads, and whose
    transforms have a long name and a tiny cost beside a large one."""
    record = RunRecord.load(DATA / "records" / "run_v1.json")
    sweep = record.loader_report.worker_sweep
    points = [
        SweepPoint(num_workers=w, batches_per_s=bps, threads=t)
        for t, curve in ((1, (3.0, 5.9, 9.1, 9.4)), (2, (3.4, 6.2, 8.8, 9.0)))
        for w, bps in zip((0, 1, 2, 4), curve, strict=True)
    ]
    record.loader_report.worker_sweep = dataclasses.replace(
        sweep, points=points, best_workers=4, best_threads=1, default_threads=2, measures="step"
    )
    record.loader_report.transforms.append(
        TransformCost(name=LONG, share=0.0001, ms_per_batch=0.02)
    )
    return record


def _pages() -> dict[str, RunRecord]:
    trace = HTA_TRACES / "nccl_parser_config"
    return {
        "run": _run_with_a_thread_sweep(),
        "job": combine([rank_record(0, 0.1, 45.0, 4.0), rank_record(1, 40.0, 3.0, 44.0)]),
        "analyze": analyze_trace([str(trace)], command=["torchdoctor", "analyze", str(trace)]),
    }


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple[RunRecord, Path, dict]]:
    """The run's, the job's and the analysis's page, opened in one chromium: by kind, the
    record, its page and what the browser saw of it (each chart's overlaps, lines and picks)."""
    folder = tmp_path_factory.mktemp("charts")
    records = _pages()
    paths = {kind: write_html(record, folder / f"{kind}.html") for kind, record in records.items()}
    views = browser_views([(path, OVERLAPS) for path in paths.values()])
    return {kind: (records[kind], paths[kind], view) for kind, view in zip(paths, views)}


@pytest.mark.parametrize("kind", ["run", "job", "analyze"])
def test_no_text_of_a_chart_overlaps_another_or_a_bar(kind, pages):
    _, page, view = pages[kind]
    assert_offline(view, page)
    charts = view["extra"]
    assert charts, "no chart drawn"
    for chart in charts:
        assert chart["overlaps"] == [], chart


def test_the_sweep_draws_a_line_per_thread_setting_and_one_pick(pages):
    _, page, view = pages["run"]  # the run with a thread sweep (_run_with_a_thread_sweep)
    (sweep,) = [c for c in view["extra"] if c["section"] == "sweep"]
    assert sweep["lines"] == 2 and sweep["picks"] == 1, sweep
    assert "pick 4 workers with 1 torch threads" in view["text"]
    assert "1 torch threads" in view["text"] and "2 torch threads" in view["text"]
    # The long transform name is cut to its column, whole in the tooltip, its value beside it.
    assert LONG not in view["text"] and "0.02 ms/batch" in view["text"]
    assert f"<title>{LONG.replace(chr(39), '&#x27;')}</title>" in page.read_text()
