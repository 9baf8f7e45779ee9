"""The issue's 'done when', at the loader doctor's level: on an input-bound script whose cost
sits in one transform, the diagnosis names it, picks a worker count, and training with the
injected settings is as much faster as predicted."""

from __future__ import annotations

import statistics

import pytest
from slow_transform import build_loader, train  # noqa: E402

from torchdoctor.loader import (  # noqa: E402
    clone_loader,
    diagnose_loader,
    fix_code,
    fix_settings,
    predicted_step_ms,
    sample_batch,
)

# The first optimizer step imports torch._dynamo and friends, which set attributes on torch;
# take that step at import so the hygiene fixture sees only what the test itself does.
train([sample_batch(build_loader(shuffle=False))], 1)


@pytest.mark.integration
@pytest.mark.timing
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_fix_is_verified_against_the_prediction():
    loader = build_loader()
    diagnosis = diagnose_loader(
        loader,
        accelerator=False,
        memory=False,
        batches_per_setting=12,
        budget_s_per_setting=2.0,
        cpu_count=2,
    )
    report = diagnosis.report
    costliest = max(report.transforms, key=lambda t: t.share)
    assert costliest.name == "RandomBlur"
    injected = fix_settings(diagnosis.findings)
    workers = injected["num_workers"]
    assert workers >= 2
    assert fix_code(injected).startswith(f"DataLoader(..., num_workers={workers}")

    batch = sample_batch(loader)
    model_alone_ms = statistics.median(train([batch] * 30, 30)[5:])
    before = train(loader, 12)
    before_ms = statistics.mean(before[2:])
    # With workers, batches arrive in rounds (several at once, then a wait): a median step
    # misses the waits. Mean over whole rounds, after the prefetched warm-up.
    warmup = 2 * workers
    after = train(clone_loader(loader, **injected), warmup + 8 * workers)
    after_ms = statistics.mean(after[warmup:])
    assert report.worker_sweep is not None
    predicted_ms = predicted_step_ms(
        model_alone_ms, report.worker_sweep.best.batches_per_s, workers
    )
    verified_speedup = before_ms / after_ms
    predicted_speedup = before_ms / predicted_ms
    print(f"predicted {predicted_speedup:.2f}x, verified {verified_speedup:.2f}x")
    assert verified_speedup > 1.5
    assert verified_speedup == pytest.approx(predicted_speedup, rel=0.3), (
        injected,
        [round(x) for x in before],
        [round(x) for x in after],
        predicted_ms,
    )
