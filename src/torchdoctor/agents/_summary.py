"""What a tool call answers, read from the JSON record the command wrote: the parts an agent acts
on (the verdict, its interval, findings at file:line, trials, the patch's judgements), each as the
record has it, nothing recomputed."""

from __future__ import annotations

from typing import Any


def _where(item: dict[str, Any]) -> str | None:
    file, line = item.get("file"), item.get("line")
    if not file:
        return None
    return f"{file}:{line}" if line else str(file)


def judged(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A judged speedup (``JudgedSpeedup`` in the record): figure, interval, allowance, word, and
    the pairs as timed where they were read against the load each run saw."""
    if not value:
        return None
    return {
        "speedup": value.get("speedup"),
        "low": value.get("low"),
        "high": value.get("high"),
        "allowance": value.get("allowance"),
        "judgement": value.get("judgement"),
        "why": value.get("why") or "",
        "as_timed": value.get("as_timed"),
    }


def verdict(record: dict[str, Any]) -> dict[str, Any] | None:
    v = record.get("verdict")
    if not v:
        return None
    return {
        "kind": v.get("kind"),
        "why": v.get("why", ""),
        "next": v.get("next", ""),
        "firm": bool(v.get("firm", True)),
        "shares": dict(v.get("shares") or {}),
    }


def ceiling(record: dict[str, Any]) -> dict[str, Any] | None:
    """The measured ceiling: the step with data made free (or communication, in a job)."""
    speedup = record.get("ceiling_speedup")
    if speedup is None:
        return None
    interval = record.get("ceiling_interval") or [None, None]
    return {"speedup": speedup, "low": interval[0], "high": interval[1]}


#: Findings about a DataLoader's settings: without a line of their own, they are at the line that
#: built the loader (``loader.created_at``), where the settings are written.
LOADER_SETTINGS = ("loader.num_workers", "loader.persistent_workers", "loader.pin_memory",
                   "loader.prefetch_factor", "loader.num_threads", "loader.batch_size")  # fmt: skip


def findings(record: dict[str, Any]) -> list[dict[str, Any]]:
    built_at = (record.get("loader") or {}).get("created_at")
    return [
        {
            "kind": f.get("kind", ""),
            "severity": f.get("severity", ""),
            "title": f.get("title", ""),
            "where": _where(f) or (built_at if f.get("kind") in LOADER_SETTINGS else None),
            "source": f.get("source") or "",
            "fix": f.get("fix", ""),
            "cost_ms": f.get("cost_ms"),
        }
        for f in record.get("findings") or []
    ]


def trials(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.get("name", ""),
            "changed": t.get("changed", ""),
            "status": t.get("status", ""),
            "reason": t.get("reason", ""),
            "judged": judged(t.get("judged")),
            "code": t.get("code", ""),
            "caveats": list(t.get("caveats") or []),
        }
        for t in record.get("trials") or []
    ]


def step_ms(record: dict[str, Any]) -> float | None:
    step = record.get("step_ms")
    return step.get("mean") if isinstance(step, dict) else None


def ending(record: dict[str, Any]) -> dict[str, Any]:
    end = record.get("ending") or {}
    return {
        "status": record.get("status") or end.get("status", ""),
        "exit_status": end.get("exit_status"),
        "words": end.get("words", ""),
    }


def diagnosis(record: dict[str, Any], path: str) -> dict[str, Any]:
    """``diagnose``'s answer."""
    return {
        **ending(record),
        "verdict": verdict(record),
        "ceiling": ceiling(record),
        "step_ms": step_ms(record),
        "measured_steps": record.get("measured_steps"),
        "findings": findings(record),
        "trials": trials(record),
        "memory": memory(record),
        "notes": list(record.get("notes") or []),
        "record": path,
    }


def memory(record: dict[str, Any]) -> dict[str, Any] | None:
    """One watched step's memory by kind (``memory_split``), in MB."""
    split = record.get("memory_split")
    if not split:
        return None

    def mb(value: Any) -> float | None:
        return None if value is None else round(value / 2**20, 3)

    held = sum(
        split.get(k, 0) for k in ("parameters", "gradients", "optimizer_state", "activations")
    )
    peak = split.get("peak")
    return {
        "parameters_mb": mb(split.get("parameters", 0)),
        "gradients_mb": mb(split.get("gradients", 0)),
        "optimizer_state_mb": mb(split.get("optimizer_state", 0)),
        "activations_mb": mb(split.get("activations", 0)),
        "largest": [
            f"{m.get('module')} ({m.get('type')}) {mb(m.get('nbytes', 0))} MiB"
            for m in split.get("largest") or []
        ],
        "peak_mb": mb(peak),
        "temporaries_mb": None if peak is None else mb(max(peak - held, 0)),
    }


def patch(record: dict[str, Any], path: str) -> dict[str, Any]:
    """``fix``'s answer: the diff, each remedy's judgement, what was left out and why."""
    p = record.get("patch") or {}
    remedies = [
        {
            "key": r.get("key", ""),
            "title": r.get("title", ""),
            "because": r.get("because", ""),
            "kept": bool(r.get("kept")),
            "reason": r.get("reason", ""),
            "judged": judged(r.get("judged")),
            "numerics_checked_losses": r.get("checked_losses", 0) if r.get("numerics") else None,
            "rechecked": r.get("rechecked", ""),
            "caveat": r.get("caveat", ""),
            "changes": [
                f"{c.get('file')}:{c.get('line')} {c.get('what', '')}" for c in r.get("changes", [])
            ],
            "left_out": [f"{s.get('setting')}: {s.get('reason')}" for s in r.get("skipped", [])],
        }
        for r in p.get("remedies") or []
    ]
    return {
        **ending(record),
        "verdict": verdict(record),
        "diff": p.get("diff", ""),
        "diff_path": p.get("path"),
        "diff_root": p.get("root"),
        "applied": bool(p.get("applied")),
        "backup": p.get("backup"),
        "judged": judged(p.get("judged")),
        "remedies": remedies,
        "notes": list(p.get("notes") or []),
        "record": path,
    }


def comparison(result: dict[str, Any], path: str) -> dict[str, Any]:
    """``compare``'s answer."""
    interval = result.get("interval") or [None, None]
    return {
        "kind": result.get("kind", ""),
        "speedup": result.get("speedup"),
        "low": interval[0] if interval else None,
        "high": interval[1] if len(interval) > 1 else None,
        "allowance": result.get("allowance"),
        "measure": result.get("measure", ""),
        "a_step_ms": result.get("a_step_ms"),
        "b_step_ms": result.get("b_step_ms"),
        "like_for_like": bool(result.get("like_for_like", True)),
        "differences": [str(d) for d in result.get("differences") or []],
        "notes": [str(n) for n in result.get("notes") or []],
        "comparison": path,
    }


def trace_analysis(record: dict[str, Any], path: str) -> dict[str, Any]:
    """``analyze_trace``'s answer."""
    trace = record.get("trace") or {}
    return {
        **ending(record),
        "verdict": verdict(record),
        "step_ms": step_ms(record),
        "files": [str(f) for f in trace.get("files") or []],
        "ranks": len(trace.get("ranks") or []),
        "findings": findings(record),
        "notes": list(record.get("notes") or []),
        "record": path,
    }
