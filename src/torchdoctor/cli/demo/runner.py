"""``torchdoctor demo``: diagnose a slow image-classifier script, fix it, measure the speedup.

Everything is made locally: a small folder of JPEG images (no download), the bundled script
``scenarios/demo_train.py`` copied and run as it is (slow), ``torchdoctor fix`` on it (the
measured remedies written into the copy as a patch and measured against it), then the same model
fed from an offline uint8 cache with on-device normalisation and the fused loss (fixed). The
headline speedup is measured side by side: the script as written and the fixed one alternated
(before, after, after, before: :data:`SIDE_BY_SIDE_ROUNDS` runs of each), judged as ``fix``
judges a patch, so load that comes and goes on the machine falls on both. The two
diagnoses ran minutes apart; their ratio is not the speedup (beside other jobs it once said
33.8x where the alternated patch alone said 1.47x).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from ..._errors import EXIT_OK
from ..._optional import require
from ...analysis.compare import Judgement, judge, pair_speedups
from ...analysis.firmness import busiest, others_cores, waited_ms
from ...options import RunOptions
from ...process import Target
from ...process.inprocess import run_target, user_traceback
from ...record import IMPROVED, UNCLEAR, RunRecord
from ...report.progress import ProgressDisplay
from ...report.terminal import render

DEMO_SCRIPT = Path(__file__).parent / "scenarios" / "demo_train.py"
#: 10 classes x 48 images: 15 batches of 32 per epoch, enough for warmup and 20 measured steps.
IMAGES_PER_CLASS = 48
IMAGE_SIZE = 256
CACHE_SIZE = 64
#: Runs of each script in the side-by-side measurement of the speedup (alternated: ABBA).
SIDE_BY_SIDE_ROUNDS = 2


def generate_images(root: Path, per_class: int = IMAGES_PER_CLASS, size: int = IMAGE_SIZE) -> Path:
    """Write ``root/class_k/*.jpg``: noisy images whose colour and stripes depend on the class."""
    require("PIL", "the demo's image dataset")
    from PIL import Image as image_mod

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:size, 0:size]
    for label in range(10):
        folder = root / f"class_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        base = np.array([(label * 37) % 256, (label * 91) % 256, (label * 53) % 256], np.float32)
        stripes = np.sin((xx * (label + 1) + yy * (10 - label)) / 12.0)[..., None] * 40
        for i in range(per_class):
            noise = rng.normal(0, 35, size=(size, size, 3))
            pixels = np.clip(base + stripes + noise, 0, 255).astype(np.uint8)
            image_mod.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=90)
    return root


@dataclass
class DemoResult:
    """Both diagnoses and how long each stage took (seconds)."""

    before: RunRecord | None = None
    after: RunRecord | None = None
    #: The fixed script against the one as written, measured side by side (``None``: too few
    #: steps in a run).
    side_by_side: Judgement | None = None
    #: Each script's mean step over its side-by-side runs (ms): before, after.
    side_ms: tuple[float, float] | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.before is not None and self.after is not None


def run_demo(
    json_dir: str | None = None,
    steps: int = 20,
    workdir: str | None = None,
    html: str | None = None,
) -> int:
    """Run the whole demo; returns an exit status. With ``html``, also writes a page with both
    diagnoses and the measured speedup there."""
    result = demo(json_dir, steps, workdir)
    if result.ok and html is not None:
        from ...analysis.compare import compare
        from ...report.compare import write_demo_html

        assert result.before is not None and result.after is not None
        path = write_demo_html(
            compare(result.before, result.after),
            result.side_by_side,
            result.before,
            result.after,
            html,
        )
        # one line whatever the terminal's width: a path broken in two does not paste
        Console().print(
            f"HTML report (both diagnoses and the speedup): {path.resolve()}",
            soft_wrap=True,
            markup=False,
        )
    return EXIT_OK if result.ok else 1


def demo(
    json_dir: str | None = None,
    steps: int = 20,
    workdir: str | None = None,
    console: Console | None = None,
) -> DemoResult:
    """Run the demo and return its records and stage timings."""
    require("PIL", "the demo (it decodes JPEG files with Pillow)")
    console = console or Console()
    if workdir is not None:
        return _run_in(Path(workdir), json_dir, steps, console)
    with tempfile.TemporaryDirectory(prefix="torchdoctor-demo-") as tmp:
        return _run_in(Path(tmp), json_dir, steps, console)


def _run_in(work: Path, json_dir: str | None, steps: int, console: Console) -> DemoResult:
    from ...remedies import build_cache

    result = DemoResult()
    seconds = result.seconds
    t_start = time.perf_counter()
    images = work / "images"
    console.print(
        f"[bold cyan]torchdoctor demo[/] generating {IMAGES_PER_CLASS * 10} JPEG images in {images}"
    )
    generate_images(images)
    seconds["images"] = time.perf_counter() - t_start

    console.rule("[bold]1. the script as written")
    # a copy in the work folder: it is the user's project `torchdoctor fix` patches
    script = work / "train.py"
    script.write_text(DEMO_SCRIPT.read_text())
    slow = Target(script=str(script), argv=["--data", str(images), "--variant", "slow"])
    t0 = time.perf_counter()
    result.before = _diagnose(slow, steps, console, "before: slow pipeline")
    seconds["before_diagnosis"] = time.perf_counter() - t0
    if result.before is None:
        return result

    console.rule("[bold]2. torchdoctor fix: the remedies written into the script, measured")
    t0 = time.perf_counter()
    _patch(slow, steps, result.before, work, console)
    seconds["patch"] = time.perf_counter() - t0

    console.rule("[bold]3. what no setting fixes: decode the images once, offline")
    cache = work / "cache"
    t0 = time.perf_counter()
    build_cache(str(images), str(cache), size=CACHE_SIZE, progress=False)
    seconds["cache_build"] = time.perf_counter() - t0
    console.print(
        f"preprocessed once, offline: decode + resize to {CACHE_SIZE}px into a uint8 cache "
        f"({seconds['cache_build']:.1f} s): "
        f"`torchdoctor cache build {images} {cache} --size {CACHE_SIZE}`"
    )
    console.print(
        "the script then reads torchdoctor.CachedDataset with uint8_collate, normalises inside "
        "the model (torchdoctor.Normalize), and uses nn.CrossEntropyLoss(weight=...) built once"
    )
    t0 = time.perf_counter()
    fixed = Target(script=str(DEMO_SCRIPT), argv=["--data", str(cache), "--variant", "fixed"])
    result.after = _diagnose(fixed, steps, console, "after: fixed pipeline")
    seconds["after_diagnosis"] = time.perf_counter() - t0
    if result.after is None:
        return result

    console.rule("[bold]4. measured speedup, side by side")
    t0 = time.perf_counter()
    measured = _side_by_side(slow, fixed, steps, console)
    if measured is not None:
        result.side_by_side, result.side_ms = measured
    seconds["side_by_side"] = time.perf_counter() - t0
    console.print(_comparison(result, result.before, result.after))
    seconds["total"] = time.perf_counter() - t_start
    console.print(
        f"demo finished in {seconds['total']:.0f} s "
        f"(first verdict after {seconds['images'] + seconds['before_diagnosis']:.0f} s)"
    )
    if json_dir:
        out = Path(json_dir)
        result.before.save(out / "before.json")
        result.after.save(out / "after.json")
        console.print(f"run records written to {out / 'before.json'} and {out / 'after.json'}")
        if result.side_by_side is not None:
            _save_side_by_side(result, out / "speedup.json")
            console.print(f"the side-by-side speedup written to {out / 'speedup.json'}")
    return result


def _diagnose(target: Target, steps: int, console: Console, title: str) -> RunRecord | None:
    with ProgressDisplay() as display:
        outcome = run_target(target, RunOptions(steps=steps, warmup=3), progress=display.update)
    if outcome.error is not None:
        console.print("".join(user_traceback(outcome.error)), markup=False)
    render(outcome.record, console, title=title)
    if outcome.record.measured_steps == 0:
        console.print("[red]the demo run measured no step; see the notes above[/]")
        return None
    return outcome.record


def _patch(target: Target, steps: int, before: RunRecord, work: Path, console: Console) -> None:
    """``torchdoctor fix`` on the diagnosed script: the patch planned, measured against the
    script as written, shown with its diff (``before.patch``)."""
    from ...patch import patch_record
    from ...report.patch import patch_section

    console.print(
        "each measured remedy is written at its place in train.py, then the patched script runs "
        "against the one as written, in alternation; only what pays is kept"
    )
    patch_record(target, RunOptions(steps=steps, warmup=3), before, str(work / "fix.diff"))
    section = patch_section(before)
    if section is not None:
        console.print(section)
    if before.patch is not None and before.patch.diff:
        from rich.syntax import Syntax

        console.print(Syntax(before.patch.diff, "diff", theme="ansi_dark", word_wrap=True))


def _side_by_side(
    slow: Target, fixed: Target, steps: int, console: Console
) -> tuple[Judgement, tuple[float, float]] | None:
    """The fixed script against the one as written, alternated (ABBA), steps only (no
    counterfactual, no loader doctor): each pair of runs shares its moment on the machine. With
    the judgement, each side's mean step over its runs."""
    from ...record import COMPLETE

    options = RunOptions(steps=steps, warmup=3).measuring_only()
    runs: dict[str, list[list[float]]] = {"before": [], "after": []}
    loads: list[float | None] = []
    waits: dict[str, list[float | None]] = {"before": [], "after": []}
    targets = {"before": slow, "after": fixed}
    order = ("before", "after")
    console.print(
        f"the script as written and the fixed one, {SIDE_BY_SIDE_ROUNDS} runs each, alternated "
        "(before, after, after, before): load that comes and goes falls on both"
    )
    with ProgressDisplay() as display:
        for r in range(SIDE_BY_SIDE_ROUNDS):
            for name in order if r % 2 == 0 else order[::-1]:
                outcome = run_target(targets[name], options, progress=display.update)
                record = outcome.record
                if record.status != COMPLETE or len(record.steps.step_ms) < 2:
                    console.print(f"[red]a side-by-side run ({name}) ended {record.status}[/]")
                    return None
                runs[name].append(list(record.steps.step_ms))
                loads.append(others_cores(record))
                waits[name].append(waited_ms(record))
    before = [x for run in runs["before"] for x in run]
    after = [x for run in runs["after"] for x in run]
    side = judge(before, after, pairs=pair_speedups(runs["before"], runs["after"]))
    means = (round(statistics.fmean(before), 3), round(statistics.fmean(after), 3))
    return unless_busy(side, loads, waits), means


def unless_busy(
    side: Judgement, loads: list[float | None], waits: dict[str, list[float | None]]
) -> Judgement:
    """The side-by-side judgement where other processes took :data:`~torchdoctor.analysis.firmness.BUSY_CORES` or more during
    a run (``loads``: each run's ``others_cpu_cores``; ``waits``: each side's runs' training
    thread's wait for a core, ms a step). The two pipelines use the cores differently (the one as
    written decodes JPEG images with PIL, the fixed one reads a uint8 cache): alternated rounds
    put the load on both sides, not on both alike (beside two test workers the fixed one
    measured 0.41x, 4.34x on a quiet machine). So
    "slower" or "no clear gain" is "could not tell", with the load in its words; a gain stands,
    its figure that moment's."""
    most = busiest(loads)
    if most is None:
        return side
    if side.kind == IMPROVED:
        moment = f"measured while other processes took up to {most:.1f} cores: the figure is "
        return replace(side, notes=[*side.notes, moment + "that moment's"])
    waited = {k: [x for x in v if x is not None] for k, v in waits.items()}
    wait_words = (
        f"; the fixed pipeline's steps waited {statistics.fmean(waited['after']):.0f} ms each "
        f"for a core, the script as written's {statistics.fmean(waited['before']):.0f} ms"
        if waited["before"] and waited["after"]
        else ""
    )
    why = (
        f"could not tell: other processes took up to {most:.1f} cores while the runs ran"
        f"{wait_words}; the two pipelines use the cores differently (the one as written decodes "
        "JPEG images, the fixed one reads a uint8 cache), so the load weighed on them unlike and "
        "moved the figure as much as the fix could: run the demo again at a quieter moment"
    )
    judged = replace(side.judged, judgement=UNCLEAR, why=why)
    return replace(side, judged=judged, notes=[why, *side.notes])


def _save_side_by_side(result: DemoResult, path: Path) -> None:
    """The side-by-side judgement as JSON: the judged speedup, each pair's own, the notes, and
    each script's mean step over its runs."""
    import dataclasses
    import json

    from ...record import write_text_atomic

    side, ms = result.side_by_side, result.side_ms
    assert side is not None and ms is not None
    plain = {
        "judged": dataclasses.asdict(side.judged),
        "pairs": side.pairs,
        "notes": side.notes,
        "mean_step_ms": {"before": ms[0], "after": ms[1]},
    }
    write_text_atomic(path, json.dumps(plain, indent=2) + "\n")


def _comparison(result: DemoResult, before: RunRecord, after: RunRecord) -> Table:
    """The headline table: the verdicts and findings of the two diagnoses; the mean steps and
    the speedup of the side-by-side runs (those of the diagnoses, minutes apart, where the side
    by side failed: their ratio is not the speedup)."""
    side = result.side_by_side
    table = Table(title_justify="left")
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    batch = 32
    assert before.step_ms and after.step_ms and before.verdict and after.verdict
    table.add_row("verdict", before.verdict.kind, after.verdict.kind)
    ms = result.side_ms or (before.step_ms.mean, after.step_ms.mean)
    table.add_row("mean step", f"{ms[0]:.1f} ms", f"{ms[1]:.1f} ms")
    table.add_row("images/s", f"{batch * 1000 / ms[0]:.0f}", f"{batch * 1000 / ms[1]:.0f}")
    table.add_row("findings", str(len(before.findings)), str(len(after.findings)))
    if side is not None:
        look = {"good": "bold green", "bad": "bold red"}.get(side.judged.tone, "bold")
        table.add_row(
            "[bold]speedup",
            "",
            f"[{look}]{side.kind} {side.judged.figure('–', '()')}",
        )
    else:
        table.add_row("[bold]speedup", "", "not measured (a side-by-side run failed)")
    captions = [
        "verdict and findings: the two diagnoses; mean step (each script's runs pooled) and "
        "speedup (their pairs' own, combined): the two scripts measured side by side, alternated"
        if result.side_ms is not None
        else "verdict, mean step and findings: the two diagnoses, minutes apart"
    ]
    if side is not None:
        captions.extend(side.notes)
    patch = before.patch
    if patch is not None and patch.judged is not None and patch.judged.interval is not None:
        # not faster: its judgement beside the figure ("could not tell" on a busy machine)
        word = "" if patch.judged.judgement == IMPROVED else f", {patch.judged.word}"
        captions.append(
            f"the patch alone (step 2, measured beside the script as written): "
            f"{patch.judged.figure('–', '()')}{word}"
        )
    table.caption = "; ".join(captions)
    return table
