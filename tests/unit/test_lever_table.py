"""One lever table: ``--try``'s choices, the trials phase's levers and the levers ``fix`` writes
are the same names, read from :mod:`torchdoctor.record.lever_names`; a name one side gains and
the others lack was a ``KeyError`` at run time."""

from __future__ import annotations

import argparse

import pytest

from torchdoctor import cli
from torchdoctor.capture.phases import trials as trials_phase
from torchdoctor.options import RunOptions, trial_list
from torchdoctor.patch import LEVERS as PATCH_LEVERS
from torchdoctor.patch import Project, plan
from torchdoctor.record import STEP_PARTS, JudgedSpeedup, RunRecord, Trial
from torchdoctor.record.lever_names import FIX_LEVERS, LEVERS, TRIAL_NAMES, LeverFacts


def test_try_offers_every_lever_of_the_table_and_no_other():
    assert trial_list("all") == TRIAL_NAMES == tuple(LEVERS)
    for name in TRIAL_NAMES:
        assert trial_list(name) == (name,)
    with pytest.raises(argparse.ArgumentTypeError, match="use all or some of amp"):
        trial_list("amp,warp-drive")
    parsed = cli.build_parser().parse_args(["run", "--try", "all", "train.py"])
    assert parsed.trials == TRIAL_NAMES and RunOptions().trials == ()
    # its help lists them all (it lacked checkpoint)
    (action,) = [a for a in _run_parser()._actions if "--try" in a.option_strings]
    assert all(name in action.help for name in TRIAL_NAMES), action.help


def _run_parser() -> argparse.ArgumentParser:
    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices["run"]


def test_the_trials_phase_pulls_each_lever_of_the_table():
    assert set(trials_phase.LEVERS) == set(TRIAL_NAMES)
    for name, lever in trials_phase.LEVERS.items():
        assert lever.name == name  # the name its trial is recorded under


SCRIPT = """\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
for step in range(3):
    out = model(torch.randn(8, 4))
    loss = out.sum()
    loss.backward()
    optimizer.step()
"""


def test_fix_plans_each_lever_the_table_says_it_writes(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    detail = {
        "model_at": f"{script}:6",
        "model": "model",
        "device_type": "cpu",
        "dtype": "bfloat16",
        "where": f"{script}:4",
        "optimizer": "AdamW",
        "flag": "fused",
    }
    record = RunRecord()
    record.trials = [
        Trial(name, name, judged=JudgedSpeedup(1.5), detail=dict(detail)) for name in TRIAL_NAMES
    ]
    remedies = plan(record, Project(script, root=tmp_path), [])
    assert sorted(r.key for r in remedies) == sorted(LEVERS[n].fix_remedy for n in FIX_LEVERS)
    titles = {LEVERS[n].fix_remedy: LEVERS[n].title for n in FIX_LEVERS}
    assert {r.key: r.title for r in remedies} == titles
    assert set(PATCH_LEVERS) <= set(FIX_LEVERS)


def test_each_lever_names_the_step_parts_it_can_change():
    parts = {name: facts.parts for name, facts in LEVERS.items()}
    assert parts["foreach"] == ("optimizer",)
    assert parts["amp"] == parts["channels-last"] == parts["compile"] == ("forward", "backward")
    assert parts["threads"] == parts["batch-size"] == STEP_PARTS
    with pytest.raises(ValueError, match="not step parts"):
        LeverFacts("warp-drive", "faster than light", ("hyperspace",))
