"""Evaluation inside the training steps: which outermost calls are evaluation, the finding, and a
compute-bound run's advice that leads with it where it weighs (synthetic records)."""

from __future__ import annotations

import torch

from torchdoctor.analysis.compute_advice import EVALUATION_LEADS
from torchdoctor.analysis.verdict import COMPUTE_BOUND, summarise
from torchdoctor.capture import evaluation_finding
from torchdoctor.capture._loop_shapes import EVALUATION_FINDING_SHARE, Evaluations, evaluating
from torchdoctor.record import RunRecord, StepSeries

SITES = [
    ("/p/train.py", 48, "output = model(x, adjacency)", "test"),
    ("/p/train.py", 61, "loss_train, acc_train = test(train_nodes)", "train_step"),
]


def _places(*places: tuple[list, list[int], int]) -> Evaluations:
    """Evaluations at ``(sites, steps, ns per call)`` each, as the hooks would note them."""
    evaluations = Evaluations()
    for sites, steps, ns in places:
        for step in steps:
            evaluations.step = step
            evaluations.started(sites, 0)
            evaluations.ended(ns)
    return evaluations


EVALUATED = _places((SITES, [1, 2, 3, 4], 1000))


def test_only_a_trained_model_in_eval_mode_with_grad_off_is_evaluating():
    model = torch.nn.Linear(2, 2)
    frozen = torch.nn.Linear(2, 2).requires_grad_(False).eval()
    model.eval()
    with torch.no_grad():
        assert evaluating(model, "optimizer") and evaluating(model, "backward")
        assert not evaluating(model, "forward")  # a loop stepped by its forward: that is its work
        assert not evaluating(model, None)  # the boundary is not known yet
        assert not evaluating(frozen, "optimizer")  # a teacher trains nothing
        model.train()  # an RL rollout, a GAN's generator for its discriminator
        assert not evaluating(model, "optimizer")
    model.eval()  # grad on in eval mode: a model left in eval mode that trains
    assert not evaluating(model, "optimizer")


def test_a_teacher_no_optimizer_updates_is_not_evaluating_though_its_weights_take_grad():
    # a teacher or a DQN target network in eval mode, called under no_grad every step: its
    # output feeds the loss; evaluating it less often would break the training
    from torchdoctor.capture._data import CaptureData
    from torchdoctor.capture._optimizers import OptimizerTracker

    student, teacher = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).eval()
    tracker = OptimizerTracker(CaptureData())
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)  # held: the tracker's is weak
    tracker.seen(optimizer)
    student.eval()
    with torch.no_grad():
        assert evaluating(student, "optimizer", tracker)
        assert not evaluating(teacher, "optimizer", tracker)


def _record(evaluation: list[float], train: float = 10.0) -> RunRecord:
    steps = StepSeries()
    for ms in evaluation:
        parts = {"forward": train, "backward": train, "optimizer": 1.0, "evaluation": ms}
        for name in ("data_wait", "to_device", "other"):
            steps.part(name).append(0.5)
        for name, value in parts.items():
            steps.part(name).append(value)
        steps.step_ms.append(sum(parts.values()) + 1.5)
        steps.batches.append(1)
    return RunRecord(steps=steps)


def test_the_finding_names_the_line_that_runs_the_evaluation_and_how_often():
    rec = _record([30.0, 0.0, 30.0, 0.0])
    found = evaluation_finding(rec, EVALUATED)
    assert found is not None and (found.file, found.line) == ("/p/train.py", 61)
    assert "test() at train.py:48" in found.title and "2 of 4 measured steps" in found.title
    assert found.fix.endswith("    loss_train, acc_train = test(train_nodes)")
    assert found.detail == {
        "steps_with": 2, "steps": 4, "share": round(60 / (4 * 22.5 + 60), 4),
        "places": ["/p/train.py:61"],
    }  # fmt: skip
    # an evaluation inlined in the loop at module level is its own line
    inline = evaluation_finding(
        rec, _places(([("/p/train.py", 9, "model(x)", "<module>")], [1], 5))
    )
    assert inline is not None and inline.line == 9 and "called here" not in inline.title


def test_no_finding_below_its_share():
    train_step = 2 * 10.0 + 1.0 + 1.5
    just_under = EVALUATION_FINDING_SHARE / (1 - EVALUATION_FINDING_SHARE) * train_step * 0.9
    assert evaluation_finding(_record([just_under] * 4), EVALUATED) is None
    assert evaluation_finding(_record([just_under * 1.2] * 4), EVALUATED) is not None
    assert evaluation_finding(_record([0.0] * 4), EVALUATED) is None


def test_a_compute_bound_runs_advice_leads_with_evaluation_where_it_weighs():
    rec = _record([60.0] * 5)
    rec.findings.append(evaluation_finding(rec, EVALUATED))
    summarise(rec)
    assert rec.verdict.kind == COMPUTE_BOUND
    assert rec.verdict.next.startswith("evaluate less often: evaluation inside the steps at ")
    assert "/p/train.py:61" in rec.verdict.next and "evaluation alone 73%" in rec.verdict.why
    train_step = 2 * 10.0 + 1.0 + 1.5
    light = EVALUATION_LEADS / (1 - EVALUATION_LEADS) * train_step * 0.9
    rec = _record([light] * 5)
    summarise(rec)
    assert rec.verdict.next.startswith("make the model's work cheaper")


def test_each_place_that_evaluates_is_told_with_how_often_it_runs():
    # a GAN's generator called in eval mode every step, and evaluate() every 4 steps: the
    # finding is at the place that took the most, the other named with how often it ran
    generator = [("/p/gan.py", 20, "fake = G(z)", "<module>")]
    evaluate = [
        ("/p/gan.py", 9, "out = D(x)", "evaluate"),
        ("/p/gan.py", 28, "evaluate()", "<module>"),
    ]
    rec = _record([30.0] * 8)
    found = evaluation_finding(
        rec, _places((generator, range(1, 9), 1000), (evaluate, [4, 8], 1500))
    )
    assert (found.file, found.line) == ("/p/gan.py", 20)
    assert "every step (the most of it; also gan.py:28 (2 of 8 steps))" in found.title
    assert found.detail["places"] == ["/p/gan.py:20", "/p/gan.py:28"]
