"""Time to verdict for the demo, and the speedup it measures.

Run: .venv/bin/python benchmarks/demo_time.py

Runs `torchdoctor demo` in this process (output discarded) and prints the wall time of each
stage and the measured before/after ratio of mean step times (the demo's own figure: a ratio of
throughput, which a median would not be), both taken in this one run.
"""

from __future__ import annotations

import io

from rich.console import Console

from torchdoctor.cli.demo.runner import demo, speedup


def main() -> None:
    result = demo(console=Console(file=io.StringIO()))
    if not result.ok:
        raise SystemExit("the demo failed; run `torchdoctor demo` to see why")
    s = result.seconds
    print(f"images generated            {s['images']:6.1f} s")
    print(f"time to first verdict       {s['images'] + s['before_diagnosis']:6.1f} s")
    print(f"offline cache build         {s['cache_build']:6.1f} s")
    print(f"second diagnosis            {s['after_diagnosis']:6.1f} s")
    print(f"whole demo                  {s['total']:6.1f} s   (goal: under 120 s)")
    print(
        f"speedup (mean step before / after): {speedup(result.before, result.after):.1f}x "
        f"({result.before.step_ms.mean:.1f} ms -> {result.after.step_ms.mean:.1f} ms; goal: 2x)"
    )


if __name__ == "__main__":
    main()
