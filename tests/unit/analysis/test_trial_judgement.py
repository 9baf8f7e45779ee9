"""Trial judgements from synthetic runs: robust to outliers and bursts of load, an allowance as
compare's, no pick unless worth it, failures and skips kept with their reason."""

from __future__ import annotations

from torchdoctor.analysis.trials import RUN_TO_RUN, trials_of
from torchdoctor.record import RunRecord, StepSeries
from trialruns import BASE, Lever, Run


def _runs(before, trial, after, name="threads", setting="2", texts=None):
    lever = Lever(name)
    return [
        Run(BASE, steps_ms=before, batches=[1] * len(before)),
        Run(lever, setting, steps_ms=trial, batches=[1] * len(trial),
            texts=texts or {"changed": name, "code": "x"}),
        Run(BASE, steps_ms=after, batches=[1] * len(after)),
    ]  # fmt: skip


def _trial(runs):
    record = RunRecord(steps=StepSeries())
    (trial,) = trials_of(record, runs)
    return trial


def test_two_outlier_baseline_steps_do_not_make_a_gain():
    # The trial's steps equal the baseline's median; two baseline steps took 129 and 260 ms
    # (a recompile, a burst): a ratio of means called this 14.95x "worth it".
    steady = [1.75, 1.7, 1.8, 1.76, 1.74, 1.77, 1.73, 1.78]
    trial = _trial(_runs([129.0, 260.0, *steady[2:]], list(steady), steady))
    assert trial.judged.word == "no clear gain", trial
    assert 0.9 < trial.judged.speedup < 1.15
    assert trial.pick is None
    assert trial.detail["outlier_steps"] == 2


def test_a_burst_in_one_baseline_block_widens_the_allowance():
    # Baseline blocks 10 ms and 14 ms apart: a 1.2x "gain" against them is within that spread.
    before = [10.0, 10.1, 9.9, 10.0, 10.2, 9.8, 10.0, 10.1]
    after = [x * 1.4 for x in before]
    trial = _trial(_runs(before, [x / 1.0 for x in [10.0] * 8], after))
    assert trial.judged.allowance >= 0.39
    assert trial.judged.word == "no clear gain"
    assert trial.pick is None


def test_a_clear_gain_is_worth_it_and_keeps_its_pick():
    base = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.1, 10.0]
    trial = _trial(_runs(base, [x / 2 for x in base], base))
    assert trial.judged.word == "worth it"
    assert trial.pick == "2"
    assert trial.judged.allowance == RUN_TO_RUN


def test_a_small_gain_inside_the_allowance_is_not_worth_it():
    base = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.0]
    trial = _trial(_runs(base, [x / 1.05 for x in base], base))
    assert trial.judged.low > 1.0  # beyond the steps' own noise...
    assert trial.judged.word == "no clear gain"  # ...but not beyond run-to-run drift


def test_slower_needs_the_allowance_too():
    base = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.0]
    assert _trial(_runs(base, [x * 1.05 for x in base], base)).judged.word == "no clear gain"
    assert _trial(_runs(base, [x * 1.5 for x in base], base)).judged.word == "slower"


def test_a_failed_lever_keeps_its_reason():
    base = [10.0] * 8
    texts = {"changed": "compile", "code": "m = torch.compile(m)", "error": "built no graph"}
    trial = _trial(_runs(base, [10.0] * 8, base, name="compile", setting="", texts=texts))
    assert trial.status == "failed" and trial.reason == "built no graph"


def test_a_small_models_utilisation_is_kept_however_small():
    # 400 k FLOPs in a 100 ms step against a 50 TFLOP/s peak: 8e-8 of it. Rounded to four
    # decimals it read 0.0, as if nothing were computed.
    from torchdoctor.analysis.trials import flops_of
    from torchdoctor.record import Stat

    record = RunRecord(steps=StepSeries())
    record.step_ms = Stat(median=100.0, p90=100.0, mean=100.0, min=100.0, max=100.0, count=3)
    counted = {"per_step": 400_000, "measured_peak": {"flops_per_s": 5e13, "source": "measured"}}
    flops = flops_of(record, counted, "cpu")
    assert flops.utilisation == 8e-8
    assert 0 < flops.utilisation < 1


def test_a_recurrent_kernel_makes_the_count_partial_whatever_its_time():
    # An LSTM's matmuls, 88% of a small language model's arithmetic, took 8-16% of its step's
    # op time (the rest: small ops' overhead); other uncounted ops count by their time together.
    from torchdoctor.analysis.trials import flops_of
    from torchdoctor.record import Stat

    record = RunRecord(steps=StepSeries())
    record.step_ms = Stat(median=10.0, p90=10.0, mean=10.0, min=10.0, max=10.0, count=3)

    def partial(*uncounted):
        ops = [{"op": op, "share": share, "recurrent": rec} for op, share, rec in uncounted]
        return flops_of(record, {"per_step": 1e6, "uncounted": ops}, "cpu").partial

    assert partial(("aten.mkldnn_rnn_layer", 0.03, True))
    assert partial(("ext.a", 0.06, False), ("ext.b", 0.05, False))
    assert not partial(("ext.a", 0.06, False))
    assert partial(("ext.a", None, False))  # untimed (an accelerator): by name
    assert not partial()
