"""sync_findings: grouping, calls per step, cost order, CPU wording, rebuilt constants."""

from __future__ import annotations

import subprocess
import sys

from torchdoctor.analysis.sync_libraries import library_setting
from torchdoctor.analysis.syncs import KINDS, sync_findings


def event(kind="item", line=10, step=0, duration_ns=None, fingerprint=None, **extra):
    return {
        "kind": kind,
        "op": extra.pop("op", "Tensor.item"),
        "file": extra.pop("file", "/proj/train.py"),
        "line": line,
        "source": extra.pop("source", "x = loss.item()"),
        "step": step,
        "duration_ns": duration_ns,
        "fingerprint": fingerprint,
        **extra,
    }


def test_identical_sites_are_grouped_with_calls_per_step():
    events = [event(step=s) for s in (0, 0, 1, 1)] + [event(line=20, step=0)]
    findings = sync_findings(events, steps=2, on_accelerator=False)
    assert [(f.line, f.calls_per_step) for f in findings] == [(10, 2.0), (20, 0.5)]
    assert findings[0].detail["calls"] == 4
    assert "2 times per step" in findings[0].title


def test_cpu_runs_say_what_would_happen_on_an_accelerator_and_have_no_cost():
    findings = sync_findings(
        [event(duration_ns=5_000_000), event("python-index", line=11)],
        steps=1,
        on_accelerator=False,
    )
    titles = {f.kind: f.title for f in findings}
    assert "would block on an accelerator" in titles["item"]
    assert "would be a host-to-device copy on an accelerator" in titles["python-index"]
    assert all(f.cost_ms is None and f.severity == "warning" for f in findings)


def test_accelerator_runs_are_ordered_by_measured_stall():
    events = [
        event("item", line=1, duration_ns=100_000),
        event("tensor-assert", line=2, duration_ns=40_000_000),
        event("tensor-assert", line=2, duration_ns=40_000_000),
        event("tolist", line=3),
    ]
    findings = sync_findings(events, steps=2, on_accelerator=True)
    assert [f.line for f in findings] == [2, 1, 3]
    assert findings[0].cost_ms == 40.0
    assert findings[0].severity == "critical"
    assert findings[1].cost_ms == 0.05 and findings[1].severity == "warning"
    assert findings[2].cost_ms is None
    assert "makes the host wait for the device" in findings[0].title


def test_same_values_at_one_site_become_a_rebuilt_constant():
    same = [event("tensor-from-python-data", step=s, fingerprint="abc") for s in (0, 1)]
    (finding,) = sync_findings(same, steps=2, on_accelerator=False)
    assert finding.kind == "constant-rebuilt"
    assert "register_buffer" in finding.fix

    changing = [event("tensor-from-python-data", step=s, fingerprint=f"v{s}") for s in (0, 1)]
    assert sync_findings(changing, 2, False)[0].kind == "tensor-from-python-data"
    once = [event("tensor-from-python-data", fingerprint="abc")]
    assert sync_findings(once, 1, False)[0].kind == "tensor-from-python-data"
    unhashed = [event("tensor-from-python-data", step=s) for s in (0, 1)]
    assert sync_findings(unhashed, 2, False)[0].kind == "tensor-from-python-data"


def test_details_keep_library_and_use_sites():
    events = [event(via="/venv/site-packages/lib.py:3", used_at="/proj/train.py:12")]
    (finding,) = sync_findings(events, 1, False)
    assert finding.detail["via"] == ["/venv/site-packages/lib.py:3"]
    assert finding.detail["used_at"] == ["/proj/train.py:12"]
    assert finding.source == "x = loss.item()" and finding.file == "/proj/train.py"


def test_every_kind_has_a_concrete_fix():
    for kind, info in KINDS.items():
        assert info.group in ("sync", "copy"), kind
        assert "`" in info.fix, kind  # names the code to write
    assert sync_findings([], 3, True) == []


def test_analysis_does_not_import_torch():
    code = "import sys, torchdoctor.analysis.syncs; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_library_sync_is_one_finding_per_library_site_and_user_line():
    lib = {"library": "somelib", "via_source": "return value.item()"}
    events = [
        event(via="/venv/site-packages/somelib/a.py:3", step=s, **lib) for s in (0, 0, 1, 1)
    ] + [event(via="/venv/site-packages/somelib/b.py:9", step=s, **lib) for s in (0, 1)]
    findings = sync_findings(events, steps=2, on_accelerator=False)
    assert [(f.detail["via"], f.calls_per_step) for f in findings] == [
        (["/venv/site-packages/somelib/a.py:3"], 2.0),
        (["/venv/site-packages/somelib/b.py:9"], 1.0),
    ]
    assert all(f.file == "/proj/train.py" and f.line == 10 for f in findings)
    assert findings[0].detail["library_source"] == "return value.item()"
    assert ", inside somelib (2 times per step)" in findings[0].title


HF_LOOP = "transformers/trainer.py:_inner_training_loop"
HF_CHECK = "if (self.args.logging_nan_inf_filter and (torch.isnan(loss) or torch.isinf(loss))):"


def test_a_known_library_setting_becomes_the_fix():
    hf = event(
        "tensor-branch",
        via="/venv/site-packages/transformers/trainer.py:1911",
        library="transformers",
        via_source=HF_CHECK,
        library_calls=(HF_LOOP, "transformers/trainer.py:train"),
    )
    (finding,) = sync_findings([hf], 1, False)
    assert "logging_nan_inf_filter=False" in finding.fix
    assert finding.fix == finding.detail["setting"]
    # Another sync in the same Trainer function is not the one the setting controls.
    other = {**hf, "via_source": "x = grad_norm.item()"}
    assert "setting" not in sync_findings([other], 1, False)[0].detail
    lightning = library_setting(
        ["lightning_fabric/utilities/apply_func.py:to_item", LIGHTNING_METRICS], "value.item()"
    )
    assert "prog_bar=False" in lightning
    assert library_setting(["somelib/a.py:f"], "x.item()") is None


LIGHTNING_METRICS = "pytorch_lightning/trainer/connectors/logger_connector/result.py:metrics"


def test_a_value_used_at_once_is_not_advised_every_k_steps():
    # reinforce's shape: the action read with .item() and handed to the environment each step
    acting = event(source="state, reward, done = env.step(action.item())", line=30)
    (found,) = sync_findings([acting, {**acting, "step": 1}], steps=2, on_accelerator=False)
    assert found.detail["used_by"] == "env.step" and "when you log it" not in found.fix
    assert "passed to `env.step`" in found.fix and "1 time per step" in found.title
    for kept in ("print(loss.item())", "losses.append(loss.item())", "total += loss.item()",
                 "meter.update(loss.item(), n)", "x = loss.item()"):  # fmt: skip
        (logged,) = sync_findings([event(source=kept)], steps=1, on_accelerator=False)
        assert "used_by" not in logged.detail and "every k steps" in logged.fix, kept


def test_a_read_with_grad_off_is_counted_in_the_window_and_read_once_per_evaluation():
    # an evaluation every 10 steps, caught once in the two watched steps: it is not "1 time per
    # step", and its fix is a read per evaluation
    reads = [event(source="val = criterion(model(vx), vy).item()", grad=False) for _ in range(2)]
    (found,) = sync_findings(reads, steps=2, on_accelerator=False)
    assert "2 times in 2 watched steps, with grad off" in found.title, found.title
    assert "per step" not in found.title and found.detail["grad"] is False
    assert "once when it ends" in found.fix
    # one read of the pair with grad on (a training step's) keeps the per-step words
    (mixed,) = sync_findings([reads[0], {**reads[1], "grad": True}], steps=2, on_accelerator=False)
    assert "1 time per step" in mixed.title and "grad" not in mixed.detail
    # read with grad off in every watched step: a training metric (accuracy), per step
    (metric,) = sync_findings(
        [{**reads[0], "step": 0}, {**reads[1], "step": 1}], steps=2, on_accelerator=False
    )
    assert "1 time per step" in metric.title and "grad" not in metric.detail
    # an action read with grad off and used at once is an action, not an evaluation
    act = event(source="obs, r, done = env.step(q(obs).argmax().item())", grad=False)
    (acted,) = sync_findings([act], steps=1, on_accelerator=False)
    assert acted.detail["used_by"] == "env.step" and "1 time per step" in acted.title
