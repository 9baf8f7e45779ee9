"""The run options: one dataclass, the ``run`` flags built from it, the script path found after them."""

from __future__ import annotations

import argparse
import dataclasses
import pickle

import pytest

from torchdoctor import cli
from torchdoctor.cli._target import target_args
from torchdoctor.cli.main import script_commands, split_script_args
from torchdoctor.options import Flag, RunOptions, add_flags, flags, from_args


def _parse(argv: list[str], parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    parser = parser or cli.build_parser()
    return parser.parse_args(split_script_args(argv, parser))


def _script(args: argparse.Namespace) -> list[str]:
    rest = args.target
    return rest[1:] if rest[:1] == ["--"] else rest


def test_no_flag_gives_the_dataclass_defaults():
    assert from_args(_parse(["run", "train.py"])) == RunOptions()
    assert from_args(_parse(["loader", "train.py"])) == RunOptions(loader_doctor="always")


def test_every_flag_reaches_its_field_and_leaves_the_script_alone():
    argv = ["run"]
    expected = {}
    for f, flag in flags():
        if flag.action == "store":
            value = "amp" if flag.name == "--try" else "3"  # a value the flag's type takes
            argv += [flag.name, value]
            expected[f.name] = flag.type(value) if flag.type else value
        else:
            argv.append(flag.name)
            expected[f.name] = flag.action == "store_true"
    args = _parse([*argv, "train.py", "--steps", "9", "-m", "x"])
    options = from_args(args)
    assert {name: getattr(options, name) for name in expected} == expected
    assert _script(args) == ["train.py", "--steps", "9", "-m", "x"]


def test_the_value_taking_flags_come_from_the_parser():
    # The set the hand-kept list held before the flags were built from RunOptions, the bound
    # and the launch flags added since.
    takes_value = {"--steps", "--warmup", "--json", "--sync-steps", "--trace", "--max-seconds"}
    takes_value |= {"--nproc-per-node", "--nnodes", "--node-rank", "--rdzv-endpoint", "--try"}
    takes_value |= {"--html", "--timeline"}
    commands = script_commands(cli.build_parser())
    fix = takes_value | {"--out", "--rounds", "--apply-within"}
    assert commands == {"run": takes_value, "loader": takes_value, "fix": fix}


@dataclasses.dataclass(frozen=True)
class _MoreOptions(RunOptions):
    """RunOptions with one more field, as a future option would add it."""

    batch_scale: int = dataclasses.field(
        default=1, metadata={"flag": Flag("--batch-scale", "scale the batch", type=int)}
    )


def _parser_for(cls: type[RunOptions]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchdoctor")
    sub = parser.add_subparsers()
    run = sub.add_parser("run")
    add_flags(run, cls)
    target_args(run)
    return parser


def test_a_new_field_is_a_new_flag_whose_value_is_not_taken_for_the_script():
    parser = _parser_for(_MoreOptions)
    assert "--batch-scale" in script_commands(parser)["run"]
    args = _parse(["run", "--batch-scale", "7", "train.py", "--lr", "1"], parser)
    options = from_args(args, _MoreOptions)
    assert isinstance(options, _MoreOptions) and options.batch_scale == 7
    assert _script(args) == ["train.py", "--lr", "1"]
    # Without the field, "7" would be the script: the parser really decides.
    args = _parse(["run", "--steps", "2", "7", "train.py"], _parser_for(RunOptions))
    assert _script(args) == ["7", "train.py"]


def test_help_shows_the_field_defaults():
    run = next(
        a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["run"]
    text = run.format_help()
    assert f"(default {RunOptions().steps})" in text
    assert f"(default {RunOptions().warmup})" in text
    assert f"(default {RunOptions().sync_steps}; 0: off)" in text


def test_options_are_read_only_and_replace_derives_a_copy():
    overrides = {"num_workers": 2}
    options = RunOptions(loader_overrides=overrides)
    overrides["num_workers"] = 8  # the caller's dict is not the run's
    assert options.loader_overrides == {"num_workers": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.steps = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        options.loader_overrides["num_workers"] = 3  # type: ignore[index]
    rerun = dataclasses.replace(options, steps=4, fix=False)
    assert (rerun.steps, options.steps) == (4, 20)
    assert rerun.loader_overrides == {"num_workers": 2}


def test_options_cross_a_process_boundary():
    options = RunOptions(steps=3, loader_overrides={"num_workers": 2}, trace_dir="t")
    again = pickle.loads(pickle.dumps(options))
    assert again == options and again.loader_overrides == {"num_workers": 2}
    with pytest.raises(TypeError):
        again.loader_overrides["num_workers"] = 3  # type: ignore[index]


@pytest.mark.parametrize(
    "argv", [["run", "--steps", "0", "t.py"], ["run", "--warmup", "-1", "t.py"]]
)
def test_bad_numbers_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(argv)
    assert exc.value.code == 2
    assert "must" in capsys.readouterr().err


def test_a_measuring_run_writes_nothing_and_measures_only_steps():
    options = RunOptions(
        json_path="a.json", html_path="a.html", timeline_path="t.json", trace_dir="tr",
        trials=("amp",), flops=True, fix=True, sync_steps=3, steps=9,
    )  # fmt: skip
    measuring = options.measuring_only(warmup=1)
    assert (measuring.json_path, measuring.html_path, measuring.timeline_path) == (None,) * 3
    assert measuring.trace_dir is None and measuring.trials == () and not measuring.flops
    assert not measuring.fix and not measuring.counterfactuals and measuring.sync_steps == 0
    assert measuring.loader_doctor == "off" and (measuring.steps, measuring.warmup) == (9, 1)


def test_a_whole_run_has_no_bound_unless_asked_and_the_others_keep_theirs():
    assert from_args(_parse(["run", "--whole", "train.py"])).max_seconds is None
    assert (
        from_args(_parse(["run", "--whole", "--max-seconds", "60", "train.py"])).max_seconds == 60
    )
    assert from_args(_parse(["run", "train.py"])).max_seconds == 900.0
    assert from_args(_parse(["fix", "train.py"])).max_seconds == 900.0
