"""The patcher's edits of users' code: where each setting lives, what is left out and why, and
that every diff applies with `git apply` and `patch -p1`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from diffs import assert_applies
from torchdoctor.patch import PatchError, Project, file_diff, plan_loader, plan_threads

HEADER = "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nds = None\n"


def _project(tmp_path: Path, text: str, name: str = "train.py", **others: str) -> Project:
    (tmp_path / name).write_text(text)
    for other, body in others.items():
        (tmp_path / other).write_text(textwrap.dedent(body))
    return Project(tmp_path / name, root=tmp_path)


def _line(project: Project, needle: str, name: str = "train.py") -> str:
    path = project.root / name
    lines = path.read_text().splitlines()
    return f"{path}:{next(i + 1 for i, line in enumerate(lines) if needle in line)}"


def _folder(tmp_path: Path, name: str) -> Path:
    (tmp_path / name).mkdir()
    return tmp_path / name


def test_a_literal_argument_is_replaced_and_its_untrue_comment_left_out(tmp_path):
    project = _project(
        tmp_path,
        HEADER
        + textwrap.dedent(
            """\
        loader = DataLoader(
            ds,
            batch_size=8,  # the batch
            num_workers=0,  # no workers yet
        )
        """
        ),
    )
    remedy = plan_loader(project, _line(project, "DataLoader("), {"num_workers": 4}, [], "sweep")
    assert [c.what for c in remedy.changes] == ["num_workers=0 → 4"]
    assert remedy.changes[0].line == 7  # at the argument's own line
    diff = project.diff({"loader"})
    # the comment was the old value's: left out, and said (issue 40: comments that lie)
    assert "-    num_workers=0,  # no workers yet\n+    num_workers=4,\n" in diff
    assert "     batch_size=8,  # the batch\n" in diff  # context, unchanged
    assert project.comment_notes({"loader"}) == [
        "train.py:7: the comment `# no workers yet` was written for the line as it was; the "
        "patch leaves it out: say what the new line does"
    ]
    assert_applies(project, diff)


def test_missing_arguments_are_added_in_the_calls_own_layout(tmp_path):
    project = _project(
        tmp_path,
        HEADER
        + textwrap.dedent(
            """\
        one = DataLoader(ds, batch_size=8)
        many = DataLoader(
            ds,
            batch_size=8,
        )
        """
        ),
    )
    settings = {"num_workers": 2, "persistent_workers": True}
    plan_loader(project, _line(project, "one ="), settings, [], "sweep")
    plan_loader(project, _line(project, "many ="), settings, [], "sweep")
    text = project.rendered({"loader"})[project.script]
    assert "one = DataLoader(ds, batch_size=8, num_workers=2, persistent_workers=True)\n" in text
    assert (
        "many = DataLoader(\n    ds,\n    batch_size=8,\n    num_workers=2,\n"
        "    persistent_workers=True,\n)\n"
    ) in text
    assert_applies(project, project.diff({"loader"}))


def test_zero_workers_removes_the_worker_only_arguments(tmp_path):
    project = _project(
        tmp_path,
        HEADER
        + "loader = DataLoader(ds, num_workers=2, persistent_workers=True, prefetch_factor=4)\n",
    )
    remedy = plan_loader(
        project,
        _line(project, "loader ="),
        {"num_workers": 0, "persistent_workers": False},
        [],
        "s",
    )
    text = project.rendered({"loader"})[project.script]
    assert "loader = DataLoader(ds, num_workers=0)\n" in text
    assert {c.what for c in remedy.changes} >= {"prefetch_factor removed (no workers)"}


def test_a_positional_setting_is_edited_in_its_place(tmp_path):
    project = _project(tmp_path, HEADER + "loader = DataLoader(ds, 8, True, None, None, 0)\n")
    plan_loader(
        project, _line(project, "loader ="), {"num_workers": 3, "pin_memory": True}, [], "s"
    )
    text = project.rendered({"loader"})[project.script]
    assert "loader = DataLoader(ds, 8, True, None, None, 3, pin_memory=True)\n" in text


def test_a_variable_is_changed_where_it_is_assigned(tmp_path):
    project = _project(
        tmp_path,
        HEADER + "WORKERS = 0  # tuned later\nloader = DataLoader(ds, num_workers=WORKERS)\n",
    )
    remedy = plan_loader(project, _line(project, "loader ="), {"num_workers": 4}, [], "s")
    assert remedy.changes[0].line == 4
    # the value changed: the comment written for the old one is left out (and said)
    assert "WORKERS = 4\n" in project.rendered({"loader"})[project.script]


def test_an_argparse_default_is_changed_unless_the_command_line_sets_it(tmp_path):
    text = HEADER + (
        "import argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('-j', '--data-workers', type=int, default=0, help='workers')\n"
        "args = p.parse_args()\n"
        "loader = DataLoader(ds, num_workers=args.data_workers)\n"
    )
    project = _project(tmp_path, text)
    remedy = plan_loader(project, _line(project, "loader ="), {"num_workers": 4}, [], "s")
    assert remedy.changes[0].what == "default of --data-workers: 0 → 4 (num_workers)"
    assert "default=4, help='workers')" in project.rendered({"loader"})[project.script]
    assert_applies(project, project.diff({"loader"}))

    given = _project(_folder(tmp_path, "given"), text)
    remedy = plan_loader(given, _line(given, "loader ="), {"num_workers": 4}, ["-j", "0"], "s")
    assert not remedy.changes
    assert remedy.skipped[0].reason == "your command line sets -j: run with --data-workers 4"


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("loader = DataLoader(ds, *extra)\n", "the call at train.py:6 passes *extra"),
        ("loader = DataLoader(ds, **opts)\nopts = {'shuffle': True}\n", "opts is not assigned"),
        ("loader = DataLoader(ds, num_workers=os.cpu_count() // 2)\n", "is computed"),
        (
            "def make(n):\n    return DataLoader(ds, num_workers=n)\nloader = make(0)\n",
            "the parameter 'n' of make()",
        ),
        ("w = 0\nw = 1\nloader = DataLoader(ds, num_workers=w)\n", "assigned more than once"),
        ("loader = DataLoader(ds, num_workers=cfg.loader.workers)\n", "cannot trace"),
    ],
)
def test_what_cannot_be_changed_safely_is_left_out_with_the_reason(tmp_path, code, words):
    project = _project(tmp_path, HEADER + "import os\nopts = {}\n" + code)
    remedy = plan_loader(project, _line(project, "DataLoader(ds"), {"num_workers": 4}, [], "s")
    assert not remedy.changes and project.diff({"loader"}) == ""
    assert words in remedy.skipped[0].reason, remedy.skipped


def test_the_loader_in_another_module_of_the_project_is_edited_there(tmp_path):
    project = _project(
        tmp_path,
        "from data import loader\n",
        **{"data.py": HEADER + "loader = DataLoader(ds, batch_size=4)\n"},
    )
    where = _line(project, "loader = DataLoader", name="data.py")
    remedy = plan_loader(project, where, {"num_workers": 2}, [], "s")
    assert remedy.changes[0].file == (tmp_path / "data.py").resolve()
    diff = project.diff({"loader"})
    assert diff.startswith("--- a/data.py\n+++ b/data.py\n")
    assert_applies(project, diff)


def test_files_outside_the_project_are_never_touched(tmp_path):
    (tmp_path / "site-packages").mkdir()
    lib = tmp_path / "site-packages" / "lib.py"
    lib.write_text(HEADER + "loader = DataLoader(ds)\n")
    project = _project(tmp_path, "import lib\n")
    remedy = plan_loader(project, f"{lib}:4", {"num_workers": 2}, [], "s")
    assert "installed package" in remedy.skipped[0].reason and not project.files
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other.py"
    elsewhere.write_text(HEADER + "loader = DataLoader(ds)\n")
    remedy = plan_loader(project, f"{elsewhere}:4", {"num_workers": 2}, [], "s")
    assert "outside the project" in remedy.skipped[0].reason


def test_a_line_without_a_dataloader_call_is_said(tmp_path):
    project = _project(tmp_path, HEADER + "loader = make_loader()\n")
    remedy = plan_loader(project, _line(project, "make_loader"), {"num_workers": 2}, [], "s")
    assert "no DataLoader(...) call" in remedy.skipped[0].reason


def test_threads_are_set_after_the_imports_or_where_the_script_sets_them(tmp_path):
    project = _project(tmp_path, '"""Doc."""\nimport torch as th\nimport os\n\nx = 1\n')
    remedy = plan_threads(project, 2, [], "s")
    assert remedy.changes[0].line == 4
    text = project.rendered({"threads"})[project.script]
    assert text == '"""Doc."""\nimport torch as th\nimport os\nth.set_num_threads(2)\n\nx = 1\n'

    own = _project(_folder(tmp_path, "own"), "import torch\ntorch.set_num_threads(8)\n")
    plan_threads(own, 2, [], "s")
    assert own.rendered({"threads"})[own.script] == "import torch\ntorch.set_num_threads(2)\n"

    computed = _project(
        _folder(tmp_path, "computed"), "import torch, os\ntorch.set_num_threads(os.cpu_count())\n"
    )
    remedy = plan_threads(computed, 2, [], "s")
    assert not remedy.changes and "sets it from os.cpu_count()" in remedy.skipped[0].reason


def test_torch_is_imported_when_the_script_has_only_from_imports(tmp_path):
    project = _project(tmp_path, "from torch import nn\n")
    plan_threads(project, 1, [], "s")
    assert project.rendered({"threads"})[project.script] == (
        "from torch import nn\nimport torch\ntorch.set_num_threads(1)\n"
    )


def test_remedies_compose_and_apply_alone_or_together(tmp_path):
    project = _project(tmp_path, HEADER + "loader = DataLoader(ds, batch_size=4)")  # no newline
    plan_loader(project, _line(project, "loader ="), {"num_workers": 2}, [], "s")
    plan_threads(project, 1, [], "s")
    both = project.rendered({"loader", "threads"})[project.script]
    assert "torch.set_num_threads(1)\n" in both and both.endswith("num_workers=2)")
    assert "set_num_threads" not in project.rendered({"loader"})[project.script]
    diff = project.diff({"loader", "threads"})
    assert diff.endswith("\n\\ No newline at end of file\n")
    assert_applies(project, diff)


def test_a_file_that_cannot_be_parsed_is_an_error_naming_it(tmp_path):
    project = _project(tmp_path, "def broken(:\n")
    with pytest.raises(PatchError, match=r"train\.py: cannot be parsed \(line 1: "):
        project.source(project.script)
    remedy = plan_loader(project, f"{project.script}:1", {"num_workers": 2}, [], "s")
    assert "cannot be parsed" in remedy.skipped[0].reason


def test_file_diff_is_empty_for_the_same_text():
    assert file_diff("a.py", b"x = 1\n", b"x = 1\n") == b""


def test_the_optimizers_flag_is_added_at_its_construction(tmp_path):
    from torchdoctor.patch import plan_optimizer

    project = _project(
        tmp_path,
        "import torch\nmodel = torch.nn.Linear(2, 2)\n"
        "opt = torch.optim.Adam(\n    model.parameters(),\n    lr=1e-3,\n)\n"
        "sched = torch.optim.lr_scheduler.StepLR(opt, 1)\n",
    )
    remedy = plan_optimizer(project, _line(project, "opt ="), "Adam", "fused", [], "trial")
    assert [c.what for c in remedy.changes] == ["fused=True added"]
    text = project.rendered({"optimizer"})[project.script]
    assert (
        "opt = torch.optim.Adam(\n    model.parameters(),\n    lr=1e-3,\n    fused=True,\n)\n"
        in text
    )
    assert_applies(project, project.diff({"optimizer"}), remedies=("optimizer",))
    other = plan_optimizer(project, _line(project, "sched ="), "Adam", "fused", [], "trial")
    assert "no Adam(...) call" in other.skipped[0].reason


def test_a_constant_imported_from_the_projects_config_is_changed_there(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "config.py").write_text("NUM_WORKERS = 0\nBATCH = 8\n")
    project = _project(
        tmp_path,
        HEADER + "from .config import NUM_WORKERS as W\nloader = DataLoader(ds, num_workers=W)\n",
        name="pkg/train.py",
    )
    remedy = plan_loader(
        project, _line(project, "loader =", name="pkg/train.py"), {"num_workers": 3}, [], "s"
    )
    assert [(c.file.name, c.what) for c in remedy.changes] == [
        ("config.py", "NUM_WORKERS = 0 → 3 (num_workers)")
    ]
    diff = project.diff({"loader"})
    assert diff.startswith("--- a/pkg/config.py\n+++ b/pkg/config.py\n")
    assert_applies(project, diff)


def test_worker_arguments_are_left_out_with_the_workers(tmp_path):
    project = _project(tmp_path, HEADER + "loader = DataLoader(ds, num_workers=compute())\n")
    remedy = plan_loader(
        project,
        _line(project, "loader ="),
        {"persistent_workers": True, "num_workers": 2, "pin_memory": True},
        [],
        "s",
    )
    assert [c.what for c in remedy.changes] == ["pin_memory=True added"]
    assert [s.setting for s in remedy.skipped] == ["num_workers", "persistent_workers"]
    assert "needs the workers" in remedy.skipped[1].reason


def test_a_changed_value_read_elsewhere_says_where(tmp_path):
    project = _project(
        tmp_path,
        HEADER + "W = 0\ntrain = DataLoader(ds, num_workers=W)\n"
        "test = DataLoader(ds, num_workers=W)\nprint('workers', W)\n",
    )
    remedy = plan_loader(project, _line(project, "train ="), {"num_workers": 2}, [], "s")
    assert remedy.changes[0].what == (
        "W = 0 → 2 (num_workers); also read at train.py:6, train.py:7, which change too"
    )


EXAMPLES_KWARGS = """\
    train_kwargs = {'batch_size': 64}
    test_kwargs = {'batch_size': 1000}
    if use_accel:
        accel_kwargs = {'num_workers': 1,
                        'persistent_workers': True,
                        'pin_memory': True,
                        'shuffle': True}
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)
    train_loader = DataLoader(ds, **train_kwargs)
    test_loader = DataLoader(ds, **test_kwargs)
    """


def test_a_setting_in_kwargs_is_added_to_the_dict_the_run_took(tmp_path):
    # pytorch/examples' mnist on a CPU: the update with the accelerator's settings did not run
    # (the run's loader had no workers), so the setting goes into train_kwargs itself.
    code = HEADER + "use_accel = False\n" + textwrap.dedent(EXAMPLES_KWARGS)
    project = _project(tmp_path, code)
    current = {"num_workers": 0, "pin_memory": False, "persistent_workers": False}
    settings = {"num_workers": 2, "persistent_workers": True}
    where = _line(project, "train_loader =")
    remedy = plan_loader(project, where, settings, [], "s", current)
    assert not remedy.skipped, remedy.skipped
    change, persistent = remedy.changes
    assert persistent.what.startswith("train_kwargs['persistent_workers'] = True added")
    assert change.line == 5 and change.what.startswith("train_kwargs['num_workers'] = 2 added")
    assert "(accel_kwargs at line 8 sets it to 1, which this run did not take)" in change.what
    diff = project.diff({"loader"})
    changed = [x for x in diff.splitlines() if x[:1] in "+-" and x[:3] not in ("+++", "---")]
    assert changed == [
        "-train_kwargs = {'batch_size': 64}",
        "+train_kwargs = {'batch_size': 64, 'num_workers': 2, 'persistent_workers': True}",
    ]
    assert_applies(project, diff)


def test_a_setting_in_kwargs_is_changed_in_the_update_the_run_took(tmp_path):
    # the same script on an accelerator: its loader had accel_kwargs' one worker
    code = HEADER + "use_accel = True\n" + textwrap.dedent(EXAMPLES_KWARGS)
    project = _project(tmp_path, code)
    current = {"num_workers": 1, "pin_memory": True, "persistent_workers": True}
    remedy = plan_loader(
        project, _line(project, "train_loader ="), {"num_workers": 3}, [], "s", current
    )
    # test_kwargs.update(accel_kwargs) reads it too: the test loader gets the change, said
    assert [c.what for c in remedy.changes] == [
        "accel_kwargs['num_workers'] = 1 → 3; also read at train.py:13, which change too"
    ]
    diff = project.diff({"loader"})
    assert (
        "-    accel_kwargs = {'num_workers': 1,\n+    accel_kwargs = {'num_workers': 3,\n" in diff
    )
    assert_applies(project, diff)
    # a dict written one entry per line gets the new one on a line of its own
    added = plan_loader(
        project, _line(project, "train_loader ="), {"prefetch_factor": 4}, [], "s", current
    )
    assert added.changes[0].what.startswith("train_kwargs['prefetch_factor'] = 4 added")


@pytest.mark.parametrize(
    ("code", "words"),
    [
        ("kw = {'num_workers': 0}\nkw['num_workers'] = 1\n", "kw[...] at line 7 may set it"),
        ("kw = {'batch_size': 8}\nkw.update(make())\n", "kw is updated from make(), computed"),
        ("kw = {**base}\n", "holds **base"),
        ("kw = {'num_workers': os.cpu_count()}\n", "kw computes it"),
        (
            "kw = {'num_workers': 0}\nkw.update({'num_workers': 0})\n",
            "it is set at kw (line 6) and",
        ),
    ],
)
def test_kwargs_that_cannot_be_followed_are_left_out_with_the_reason(tmp_path, code, words):
    text = HEADER + "import os\nbase = {}\n" + code + "loader = DataLoader(ds, **kw)\n"
    project = _project(tmp_path, text)
    current = {"num_workers": 0}
    remedy = plan_loader(project, _line(project, "loader ="), {"num_workers": 2}, [], "s", current)
    assert not remedy.changes and project.diff({"loader"}) == "", remedy.changes
    (skipped,) = remedy.skipped
    assert skipped.reason.startswith("the call passes **kw: ") and words in skipped.reason, skipped
    assert skipped.reason.endswith("set num_workers=2 there")


def test_a_setting_read_from_a_config_dict_is_changed_in_its_entry(tmp_path):
    code = "config = {'workers': 0, 'lr': 0.1}\nloader = DataLoader(ds, num_workers=config['workers'])\n"
    project = _project(tmp_path, HEADER + code)
    current = {"num_workers": 0}
    remedy = plan_loader(project, _line(project, "loader ="), {"num_workers": 2}, [], "s", current)
    assert [c.what for c in remedy.changes] == ["config['workers'] = 0 → 2 (num_workers)"]
    assert "+config = {'workers': 2, 'lr': 0.1}\n" in project.diff({"loader"})
    # an entry the run did not take (its value is not the run's) is not changed
    other = _project(_folder(tmp_path, "other"), HEADER + code)
    skipped = plan_loader(
        other, _line(other, "loader ="), {"num_workers": 2}, [], "s", {"num_workers": 3}
    )
    assert not skipped.changes
    assert (
        "num_workers comes from config['workers']: no entry 'workers' the run took"
        in skipped.skipped[0].reason
    )


def test_kwargs_assigned_one_dict_or_another_take_the_branch_the_run_took(tmp_path):
    # pytorch/examples' vae and mnist_rnn: `kwargs = {...} if use_accel else {}`
    code = "kwargs = {'num_workers': 1, 'pin_memory': True} if use_accel else {}\n"
    code += "loader = DataLoader(ds, shuffle=True, **kwargs)\n"
    project = _project(tmp_path, HEADER + "use_accel = False\n" + code)
    current = {"num_workers": 0, "pin_memory": False}
    remedy = plan_loader(project, _line(project, "loader ="), {"num_workers": 2}, [], "s", current)
    (change,) = remedy.changes
    assert change.what == (
        "kwargs['num_workers'] = 2 added (the other branch of kwargs at line 5 sets it to 1, "
        "which this run did not take)"
    )
    new = "+kwargs = {'num_workers': 1, 'pin_memory': True} if use_accel else {'num_workers': 2}\n"
    assert new in project.diff({"loader"})
    # on an accelerator the run took the first branch: its entry is changed
    on = _project(_folder(tmp_path, "on"), HEADER + "use_accel = True\n" + code)
    taken = plan_loader(
        on,
        _line(on, "loader ="),
        {"num_workers": 3},
        [],
        "s",
        {"num_workers": 1, "pin_memory": True},
    )
    assert [c.what for c in taken.changes] == ["kwargs['num_workers'] = 1 → 3"]
    # neither branch the run's (or no telling which): left out
    neither = _project(_folder(tmp_path, "neither"), HEADER + "use_accel = True\n" + code)
    left = plan_loader(
        neither,
        _line(neither, "loader ="),
        {"num_workers": 3},
        [],
        "s",
        {"num_workers": 1, "pin_memory": False},
    )
    assert not left.changes and "kwargs is not assigned one dict literal" in left.skipped[0].reason


@pytest.mark.parametrize(
    ("code", "words"),
    [
        # a parameter of the function the call is in is its callers' dict, not a module one's
        (
            "kw = {'batch_size': 8}\ndef build(ds, kw):\n    return DataLoader(ds, **kw)\n"
            "loader = build(ds, {})\n",
            "kw is a parameter of build()",
        ),
        (
            "kw = {'batch_size': 8}\nkw |= {'num_workers': 1}\nloader = DataLoader(ds, **kw)\n",
            "kw is changed in place at line 5",
        ),
        (
            "kw = {'num_workers': 0}\ndel kw['num_workers']\nloader = DataLoader(ds, **kw)\n",
            "kw[...] at line 5 may set it",
        ),
        (
            "kw = {'pin_memory': True}\nkw.pop('pin_memory')\nloader = DataLoader(ds, **kw)\n",
            "kw.pop(...) at line 5 changes it",
        ),
        # the run's value is not the dict's own (something else changes it): no second key
        (
            "kw = {'batch_size': 8, 'num_workers': 4}\nloader = DataLoader(ds, **kw)\n",
            "kw holds it with another value than the run's",
        ),
    ],
)
def test_kwargs_whose_value_the_text_cannot_vouch_for_are_left_out(tmp_path, code, words):
    project = _project(tmp_path, HEADER + code)
    where = _line(project, "DataLoader(ds, **kw)")
    remedy = plan_loader(project, where, {"num_workers": 2}, [], "s", {"num_workers": 0})
    assert not remedy.changes and project.diff({"loader"}) == "", remedy.changes
    assert words in remedy.skipped[0].reason, remedy.skipped


def test_kwargs_are_read_in_the_scope_of_the_call(tmp_path):
    # an update after the call, and a same-named dict in another function, are not this one's
    code = (
        "def debug():\n    kw = {'num_workers': 9}\n    return kw\n"
        "kw = {u'batch_size': 8}\n"  # a prefixed key: the new one is quoted as it is
        "loader = DataLoader(ds, **kw)\n"
        "kw.update({'num_workers': 0})\n"
        "test_loader = DataLoader(ds, **kw)\n"
    )
    project = _project(tmp_path, HEADER + code)
    remedy = plan_loader(project, _line(project, "loader = DataLoader"), {"num_workers": 2}, [], "s",
                         {"num_workers": 0})  # fmt: skip
    assert [c.what for c in remedy.changes][0].startswith("kw['num_workers'] = 2 added"), remedy
    assert "+kw = {u'batch_size': 8, 'num_workers': 2}\n" in project.diff({"loader"})


def test_no_workers_beside_a_dict_that_needs_them_is_left_out(tmp_path):
    code = "kw = {'batch_size': 8, 'persistent_workers': True}\n"
    code += "loader = DataLoader(ds, num_workers=2, **kw)\n"
    project = _project(tmp_path, HEADER + code)
    remedy = plan_loader(project, _line(project, "loader ="), {"num_workers": 0}, [], "s",
                         {"num_workers": 2, "persistent_workers": True})  # fmt: skip
    assert not remedy.changes and project.diff({"loader"}) == ""
    assert "its persistent_workers needs workers" in remedy.skipped[0].reason


def test_entries_added_leave_each_comment_on_its_own_entry(tmp_path):
    code = "kw = {\n    'batch_size': 8,  # per device\n    'shuffle': True,  # each epoch\n}\n"
    code += "loader = DataLoader(ds, **kw)\n"
    project = _project(tmp_path, HEADER + code)
    plan_loader(project, _line(project, "loader ="), {"num_workers": 2, "pin_memory": True}, [],
                "s", {"num_workers": 0, "pin_memory": False})  # fmt: skip
    changed = [
        x
        for x in project.diff({"loader"}).splitlines()
        if x[:1] in "+-" and x[:3] not in ("+++", "---")
    ]
    assert changed == ["+    'num_workers': 2,", "+    'pin_memory': True,"], changed


def test_a_partial_of_dataloader_is_changed_where_it_is_made(tmp_path):
    text = HEADER + (
        "import functools\n"
        "make_loader = functools.partial(DataLoader, batch_size=64, num_workers=0)\n"
        "loader = make_loader(ds, pin_memory=False)\n"
    )
    project = _project(tmp_path, text)
    remedy = plan_loader(
        project, _line(project, "loader = make_loader"), {"num_workers": 4, "pin_memory": True},
        [], "s",
    )  # fmt: skip
    rendered = project.rendered({"loader"})[project.script]
    assert "partial(DataLoader, batch_size=64, num_workers=4)" in rendered
    assert "make_loader(ds, pin_memory=True)" in rendered  # the call's own keyword wins there
    assert not remedy.skipped, remedy.skipped
    assert_applies(project, project.diff({"loader"}))


def test_a_config_classs_default_is_changed_unless_its_construction_sets_it(tmp_path):
    config = (
        "from dataclasses import dataclass\n"
        "@dataclass\nclass Config:\n    batch_size: int = 32\n    workers: int = 0\n"
    )
    project = _project(tmp_path, HEADER + config + (
        "cfg = Config()\nloader = DataLoader(ds, num_workers=cfg.workers)\n"
    ))  # fmt: skip
    remedy = plan_loader(project, _line(project, "loader ="), {"num_workers": 4}, [], "s")
    assert remedy.changes[0].what == "default of Config.workers: 0 → 4 (num_workers)"
    assert "    workers: int = 4\n" in project.rendered({"loader"})[project.script]
    assert_applies(project, project.diff({"loader"}))
    # a construction that passes it: changed there, the default left alone
    given = _project(_folder(tmp_path, "given"), HEADER + config + (
        "cfg = Config(workers=1)\nloader = DataLoader(ds, num_workers=cfg.workers)\n"
    ))  # fmt: skip
    remedy = plan_loader(given, _line(given, "loader ="), {"num_workers": 4}, [], "s")
    text = given.rendered({"loader"})[given.script]
    assert "Config(workers=4)" in text and "    workers: int = 0\n" in text
    # one built from a YAML file's values: said where, nothing changed
    loaded = _project(_folder(tmp_path, "loaded"), HEADER + "import yaml\n" + config + (
        "cfg = Config(**yaml.safe_load(open('train.yaml')))\n"
        "loader = DataLoader(ds, num_workers=cfg.workers)\n"
    ))  # fmt: skip
    remedy = plan_loader(loaded, _line(loaded, "loader ="), {"num_workers": 4}, [], "s")
    assert not remedy.changes and loaded.diff({"loader"}) == ""
    assert "Config(**yaml.safe_load(open('train.yaml'))) at train.py:" in remedy.skipped[0].reason
    assert "(from train.yaml, named at train.py:" in remedy.skipped[0].reason


def test_a_value_from_a_config_file_names_the_file(tmp_path):
    project = _project(tmp_path, HEADER + (
        "import yaml\ncfg = yaml.safe_load(open('conf/train.yml'))\n"
        "loader = DataLoader(ds, num_workers=cfg.loader.workers)\n"
    ))  # fmt: skip
    remedy = plan_loader(project, _line(project, "loader ="), {"num_workers": 4}, [], "s")
    assert not remedy.changes
    assert "(from conf/train.yml, named at train.py:" in remedy.skipped[0].reason, remedy.skipped
