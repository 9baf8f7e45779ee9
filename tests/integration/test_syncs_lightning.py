"""Under Lightning, the user's LightningModule line is reported and Lightning's own are not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torchdoctor.capture.syncs import SyncWatcher

pl = pytest.importorskip("pytorch_lightning")

HERE = Path(__file__).resolve()


class LitClassifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 10)
        self.last_loss = 0.0

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("loss", loss)
        self.last_loss = loss.item()  # the user's sync
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class WatchSteps(pl.Callback):
    """Starts the watcher in one hook call and stops it in another, as the runner does."""

    def __init__(self, watcher: SyncWatcher):
        self.watcher = watcher
        self.started = False

    def on_train_batch_start(self, *args):
        if not self.started:
            self.watcher.start()
            self.started = True
        else:
            self.watcher.mark_step()

    def on_train_end(self, *args):
        self.watcher.stop()


@pytest.fixture
def undo_lightnings_dataloader_patches():
    """Lightning rebinds DataLoader dunders (e.g. ``__delattr__``) and keeps them; put them back
    so the hygiene check judges only torchdoctor."""
    loader_cls = torch.utils.data.DataLoader
    before = dict(vars(loader_cls))
    yield
    for name in set(vars(loader_cls)) - set(before):
        delattr(loader_cls, name)
    for name, value in before.items():
        if vars(loader_cls).get(name) is not value:
            setattr(loader_cls, name, value)


@pytest.mark.integration
@pytest.mark.usefixtures("undo_lightnings_dataloader_patches")
def test_lightning_module_line_is_the_users():
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 10, (64,)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=16)
    watcher = SyncWatcher(on_accelerator=False)
    trainer = pl.Trainer(
        max_steps=4,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[WatchSteps(watcher)],
    )
    try:
        trainer.fit(LitClassifier(), loader)
    finally:
        watcher.stop()
    findings = watcher.findings()
    line = next(
        n for n, t in enumerate(HERE.read_text().splitlines(), 1) if "# the user's sync" in t
    )
    assert [(f.kind, Path(f.file), f.line) for f in findings] == [("item", HERE, line)]
    assert findings[0].calls_per_step == 1.0


@pytest.mark.integration
def test_lightnings_progress_bar_sync_names_lightnings_line_and_the_setting(lightning_loop_run):
    # `torchdoctor run` on the scenario, in a child process as a user runs it; the run is shared
    # with test_run's test_lightning_trainer (tests/shared_runs.py).
    script, done = lightning_loop_run.script, lightning_loop_run.done
    assert done.returncode == 0, done.stderr[-2000:]
    (finding,) = [f for f in lightning_loop_run.record["findings"] if f.get("file")]
    fit_line = next(
        n for n, t in enumerate(script.read_text().splitlines(), 1) if "trainer.fit(" in t
    )
    assert (finding["kind"], finding["file"], finding["line"]) == ("item", str(script), fit_line)
    assert finding["detail"]["library"] in ("lightning_fabric", "lightning")
    assert finding["detail"]["library_source"] == "return value.item()"
    assert "prog_bar=False" in finding["fix"]
    # Lightning reads the bar's values after each batch and again when the bar draws.
    assert finding["calls_per_step"] == 2.0
