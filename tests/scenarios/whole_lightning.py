"""A PyTorch Lightning run with a validation pass and a checkpoint each epoch, each made slow
by a known amount in the LightningModule's own hooks: ``run --whole`` under Lightning's loops."""

import argparse
import tempfile
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--val-batch-s", type=float, default=0.02)
parser.add_argument("--save-s", type=float, default=0.3)
args = parser.parse_args()


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        time.sleep(args.val_batch_s)  # metrics of the batch
        self.log("val_loss", loss)

    def on_save_checkpoint(self, checkpoint):
        time.sleep(args.save_s)  # extra state gathered for the checkpoint

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(n, shuffle):
    data = TensorDataset(torch.randn(n, 16), torch.randint(0, 4, (n,)))
    return DataLoader(data, batch_size=8, shuffle=shuffle)


with tempfile.TemporaryDirectory() as out:
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[ModelCheckpoint(dirpath=out, save_top_k=-1)],
        default_root_dir=out,
    )
    trainer.fit(Module(), loader(8 * 40, True), loader(8 * 5, False))
