"""Loops of an unusual shape, as the hooks meet them: a model run through its ``forward()``
method (no module hook fires: the modules an optimizer trains are found and their ``forward``
timed), and backward calls that never change a parameter (a loop that trains nothing)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..record import Finding, RunRecord
from ._frames import is_user_file, statement_at

#: Evaluation inside the steps is a finding once it takes this share of their time.
EVALUATION_FINDING_SHARE = 0.05


def never_updates_finding(site: Any) -> Finding:
    """A loop whose backward calls never change a parameter: it trains nothing."""
    return Finding(
        kind="loop.never-updates",
        title="parameters never change: no optimizer.step() and no in-place update after the "
        "backward calls",
        fix="# build an optimizer and step it after the backward, or update the parameters\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "loss.backward()\n"
        "optimizer.step()\n"
        "optimizer.zero_grad()",
        file=site.file if site is not None else None,
        line=site.line if site is not None else None,
        source=site.source if site is not None else None,
        severity="critical",
    )


def trainable(module: Any) -> bool:
    """Whether a module has a parameter that takes gradients (a transform or a loss has none)."""
    return any(p.requires_grad for p in module.parameters())


def evaluating(module: Any, boundary: str | None, optimizers: Any = None) -> bool:
    """Whether an outermost call evaluates the model inside a training loop: a trained module
    in eval mode with grad off (a validation pass run every step). A no-grad call in training
    mode is the training's own work (an RL rollout, a GAN's generator for its discriminator), and
    a module no optimizer updates (a teacher, a target network, frozen or not) trains nothing;
    a loop stepped by its forward has no other work. ``optimizers``: the session's tracker
    (:meth:`~._optimizers.OptimizerTracker.trains`); without one, trainable parameters do."""
    if boundary in (None, "forward") or module.training or torch.is_grad_enabled():
        return False
    if not trainable(module):
        return False
    return optimizers is None or boundary != "optimizer" or optimizers.trains(module)


def trained_modules(optimizer: Any) -> list[Any]:
    """The outermost modules all of whose trainable parameters ``optimizer`` updates.

    Found once per optimizer, among the live modules (a walk of the garbage collector's objects).
    """
    import gc

    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    candidates = []
    module_type = torch.nn.Module
    for obj in gc.get_objects():
        # issubclass of the type: isinstance would read ``__class__``, a property on some
        # lazily deprecated objects that warns
        if issubclass(type(obj), module_type):
            own = [id(p) for p in obj.parameters() if p.requires_grad]
            if own and all(i in params for i in own):
                candidates.append(obj)
    inner = {id(m) for c in candidates for m in c.modules() if m is not c}
    return [m for m in candidates if id(m) not in inner]


def forward_timed_by(hooks: Any, module: Any) -> Callable[..., Any]:
    forward = module.forward

    def timed_forward(*args, **kwargs):
        hooks.forward_pre(module, args)
        try:
            return forward(*args, **kwargs)
        finally:
            hooks.forward_post(module, args, None)

    return timed_forward


def time_direct_forwards(hooks: Any, optimizer: Any) -> None:
    """A loop whose model runs through ``self.forward(x)`` (no module call, so no module hook
    fires): time the modules this optimizer trains by wrapping their ``forward``."""
    if optimizer in hooks._direct_searched:
        return
    hooks._direct_searched.add(optimizer)
    modules = trained_modules(optimizer)
    for module in modules:
        hooks.patcher.set(module, "forward", forward_timed_by(hooks, module))
        hooks._direct_forwards.append(type(module).__name__)
    if modules and not hooks._direct_note:
        hooks._direct_note = True
        hooks.data.notes.append(
            "the model is run through its forward() method, not by calling the module, so "
            "module hooks never fire: torchdoctor timed the forward() of the modules each "
            f"optimizer trains ({', '.join(dict.fromkeys(hooks._direct_forwards))})"
        )


#: Where an evaluation runs: ``(file, line, statement, function)``.
Site = tuple[str, int, str, str]


def evaluation_sites() -> list[Site]:
    """Where an evaluation inside a step runs: the user's line that calls the model, then the
    line that called its function (``test()`` called from the training step): that line runs
    the evaluation. Read at each evaluating call (its place is where it ran)."""
    frame = sys._getframe(1)
    sites: list[Site] = []
    while frame is not None and len(sites) < 2:
        name, line, function = frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name
        if is_user_file(name):
            sites.append((name, line, statement_at(name, line), function))
            if function == "<module>":
                break
        frame = frame.f_back
    return sites


@dataclass
class EvaluationPlace:
    """One line that runs an evaluation: its user sites (the model's call first), the time its
    calls took, and the steps it ran in."""

    sites: list[Site]
    ns: int = 0
    steps: set[int] = field(default_factory=set)

    @property
    def where(self) -> str:
        """``file:line`` of the line that runs it."""
        return f"{self.sites[-1][0]}:{self.sites[-1][1]}" if self.sites else ""


class Evaluations:
    """Each place that evaluated inside the training steps, with its time and the steps it ran
    in: a GAN's generator called in eval mode every step and an ``evaluate()`` every 4 steps are
    two places, each told as it runs."""

    def __init__(self) -> None:
        #: By ``(file, line)`` of the line that runs it.
        self.places: dict[tuple[str, int], EvaluationPlace] = {}
        self._open: tuple[EvaluationPlace, int] | None = None
        #: Steps ended so far (the hooks count them): which step an evaluation ran in.
        self.step = 0

    def started(self, sites: list[Site], now_ns: int) -> None:
        key = (sites[-1][0], sites[-1][1]) if sites else ("", 0)
        place = self.places.setdefault(key, EvaluationPlace(sites))
        place.steps.add(self.step)
        self._open = (place, now_ns)

    def ended(self, now_ns: int) -> None:
        if self._open is not None:
            place, started = self._open
            place.ns += now_ns - started
            self._open = None

    def ranked(self) -> list[EvaluationPlace]:
        """The places, the one that took the most time first."""
        return sorted(self.places.values(), key=lambda p: -p.ns)


def evaluation_finding(record: RunRecord, evaluations: Evaluations) -> Finding | None:
    """Evaluation inside the training steps, where it takes a share of them worth saying: at
    the place that took the most of it, each other place named with how often it ran."""
    evaluation = record.steps.part("evaluation")
    total = sum(record.steps.step_ms)
    if not evaluation or total <= 0 or sum(evaluation) < EVALUATION_FINDING_SHARE * total:
        return None
    n, with_it = len(evaluation), sum(1 for ms in evaluation if ms > 0)
    mean, share = sum(evaluation) / n, sum(evaluation) / total
    places = evaluations.ranked()
    seen = [s for p in places for s in p.steps]
    span = max(seen) - min(seen) + 1 if seen else 0

    def how_often(steps: set[int]) -> str:
        if not span or len(steps) >= span:
            return "every step"
        return f"{len(steps)} of {span} steps"

    sites = places[0].sites if places else []
    inner, outer = (sites[0], sites[-1]) if sites else (None, None)
    runs = ""
    if inner is not None and outer is not inner:
        runs = f"{inner[3]}() at {os.path.basename(inner[0])}:{inner[1]}, called here, "
    if len(places) > 1:
        others = "; ".join(
            f"also {os.path.basename(p.where)} ({how_often(p.steps)})"
            for p in places[1:]
            if p.sites
        )
        every = f"{how_often(places[0].steps)} (the most of it; {others})"
    else:
        every = "every measured step" if with_it == n else f"{with_it} of {n} measured steps"
    return Finding(
        kind="loop.evaluation-in-step",
        title=f"evaluation inside the training steps: {runs}runs the model in eval mode with "
        f"grad off in {every}, {mean:.1f} ms a step ({share:.0%} of step time)",
        fix="# evaluate every k steps or once an epoch, not in every training step (where its "
        "output is needed every step, e.g. an action, it stays)\n"
        "if step % eval_every == 0:\n"
        f"    {outer[2] if outer is not None else 'evaluate(model)'}",
        file=outer[0] if outer is not None else None,
        line=outer[1] if outer is not None else None,
        source=outer[2] if outer is not None else None,
        cost_ms=round(mean, 3),
        detail={
            "steps_with": with_it,
            "steps": n,
            "share": round(share, 4),
            "places": [p.where for p in places if p.sites],
        },
    )
