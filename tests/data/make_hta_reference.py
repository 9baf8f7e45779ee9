"""Record HolisticTraceAnalysis's temporal and idle-time breakdowns of the real traces in tests/data/hta.

HTA (and pandas) are NOT torchdoctor dependencies; this script runs only in a scratch venv:

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install -c constraints.txt HolisticTraceAnalysis   # 0.5.0 was used
    /tmp/hta-venv/bin/python tests/data/make_hta_reference.py tests/data/hta \
        tests/data/hta_reference.json

The output is checked in; tests/test_trace_hta_agreement.py compares torchdoctor's numbers
to it. Unrounded values are stored (HTA rounds its percentage columns to 2 decimals and its
idle ratios to 0.01), so the comparison can be held to a tight tolerance.
"""

from __future__ import annotations

import gzip
import json
import logging
import sys
import warnings
from importlib.metadata import version
from pathlib import Path


def main(trace_root: str, out_path: str) -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    root = Path(trace_root)
    out: dict[str, object] = {
        "hta_version": version("HolisticTraceAnalysis"),
        "command": "python tests/data/make_hta_reference.py tests/data/hta "
        "tests/data/hta_reference.json",
        "include_last_profiler_step": False,
        "consecutive_kernel_delay": 30,
        "traces": {},
    }
    for path in sorted(root.rglob("*.json.gz")):
        rel = str(path.relative_to(root))
        with gzip.open(path, "rt") as fh:
            rank = int((json.load(fh).get("distributedInfo") or {}).get("rank", 0))
        ta = TraceAnalysis(trace_files={rank: str(path)}, trace_dir=str(path.parent))
        entry: dict[str, object] = {"rank": rank}
        tb = ta.get_temporal_breakdown(visualize=False)
        row = tb.iloc[0]
        cols = {c.split("(")[0]: c for c in tb.columns if c.endswith(")")}
        kernel = float(row[cols["kernel_time"]])
        entry["temporal"] = {
            "kernel_time_us": kernel,
            "idle_time_us": float(row[cols["idle_time"]]),
            "compute_time_us": float(row[cols["compute_time"]]),
            "non_compute_time_us": float(row[cols["non_compute_time"]]),
            "idle_pct": 100 * float(row[cols["idle_time"]]) / kernel if kernel else 0.0,
            "compute_pct": 100 * float(row[cols["compute_time"]]) / kernel if kernel else 0.0,
            "non_compute_pct": 100 * float(row[cols["non_compute_time"]]) / kernel
            if kernel
            else 0.0,
        }
        try:
            idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
        except Exception as exc:  # HTA fails on some tiny traces; record that it did
            entry["idle"] = {"error": f"{type(exc).__name__}: {exc}"}
        else:
            streams: dict[str, dict[str, float]] = {}
            for rec in idle.to_dict("records"):
                streams.setdefault(str(int(rec["stream"])), {})[rec["idle_category"]] = float(
                    rec["idle_time"]
                )
            entry["idle"] = {"streams_us": streams}
        out["traces"][rel] = entry  # type: ignore[index]
    Path(out_path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
