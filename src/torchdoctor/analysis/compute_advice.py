"""A compute-bound run in words: why (the compute's share, evaluation inside the steps apart)
and what to try next (evaluation first where it weighs, then the model's work made cheaper)."""

from __future__ import annotations

from ..record import OUT_OF_MEMORY, RunRecord

#: A data-free step less than this much faster is no gain (the two phases' noise).
CEILING_NO_GAIN = 1.05


def why_compute(record: RunRecord, shares: dict[str, float], step: float) -> str:
    text = f"forward, backward and optimizer take {pct(shares['compute'])} of a mean {step:.1f} ms step"
    evaluation = evaluation_share(record)
    if evaluation > 0:
        text = (
            f"forward, backward, optimizer and evaluation inside the step take "
            f"{pct(shares['compute'])} of a mean {step:.1f} ms step (evaluation alone "
            f"{pct(evaluation)})"
        )
    ceiling = record.ceiling_speedup
    if ceiling is not None:
        text += (
            f"; with data made free the step is only {ceiling:.2f}x faster"
            if ceiling >= CEILING_NO_GAIN
            else "; with data made free the step is no faster"
        )
    return text


_NEXT_COMPUTE = (
    "make the model's work cheaper: mixed precision (torch.autocast), torch.compile, a batch "
    "size that fills the device, fused optimizers (foreach/fused=True); input fixes will not help"
)


#: Evaluation inside the steps leads a compute-bound run's advice from this share of them on.
EVALUATION_LEADS = 0.10


def evaluation_share(record: RunRecord) -> float:
    """The share of the measured steps' time spent evaluating the model inside them."""
    total = sum(record.steps.step_ms)
    return round(sum(record.steps.part("evaluation")) / total, 4) if total > 0 else 0.0


def next_compute(record: RunRecord) -> str:
    """Where the model's work can be made cheaper; no autocast where the script has it; first,
    evaluation run inside the steps, where it takes a share of them worth saying."""
    dtype = record.seen.get("autocast_dtype")
    text = _NEXT_COMPUTE
    if record.status == OUT_OF_MEMORY:  # a batch that fills the device is what did not fit
        text = text.replace(", a batch size that fills the device", "")
    if dtype:
        text = text.replace(": mixed precision (torch.autocast),",
                            f" (its forward already runs under torch.autocast, {dtype}):")  # fmt: skip
    evaluation = evaluation_share(record)
    if evaluation >= EVALUATION_LEADS:
        found = next((f for f in record.findings if f.kind == "loop.evaluation-in-step"), None)
        at = f" at {found.file}:{found.line}" if found is not None and found.file else ""
        text = (
            f"evaluate less often: evaluation inside the steps{at} takes {pct(evaluation)} of "
            f"them (every k steps or once an epoch, outside the training step); then {text}"
        )
    return text


def pct(share: float) -> str:
    return f"{share * 100:.0f}%"
