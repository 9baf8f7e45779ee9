"""Time to verdict for the demo, and the speedup it measures.

Run: .venv/bin/python benchmarks/demo_time.py

Runs `torchdoctor demo` in this process (output discarded) and prints the wall time of each
stage and the demo's speedup: the fixed script against the one as written, measured side by
side (alternated runs, a ratio of mean steps: of throughput), both taken in this one run.
"""

from __future__ import annotations

import io

from rich.console import Console

from torchdoctor.cli.demo.runner import demo


def main() -> None:
    result = demo(console=Console(file=io.StringIO()))
    if not result.ok:
        raise SystemExit("the demo failed; run `torchdoctor demo` to see why")
    s = result.seconds
    print(f"images generated            {s['images']:6.1f} s")
    print(f"time to first verdict       {s['images'] + s['before_diagnosis']:6.1f} s")
    print(f"offline cache build         {s['cache_build']:6.1f} s")
    print(f"second diagnosis            {s['after_diagnosis']:6.1f} s")
    print(f"side-by-side speedup        {s['side_by_side']:6.1f} s")
    print(f"whole demo                  {s['total']:6.1f} s   (goal: under 120 s)")
    side = result.side_by_side
    figure = f"{side.kind} {side.judged.figure()}" if side is not None else "not measured"
    print(f"speedup, side by side: {figure} (goal: 2x)")


if __name__ == "__main__":
    main()
