"""A PyTorch Lightning training script with a slow Dataset."""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

parser = argparse.ArgumentParser()
parser.add_argument("--getitem-ms", type=float, default=0.0)
parser.add_argument("--prog-bar", action="store_true", help="show the loss in the progress bar")
args = parser.parse_args()


class Slow(Dataset):
    def __init__(self):
        self.x = torch.randn(256, 16)
        self.y = torch.randint(0, 4, (256,))

    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(args.getitem_ms / 1000)
        return self.x[i], self.y[i]


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if args.prog_bar:
            self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


trainer = pl.Trainer(
    max_epochs=50,
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=args.prog_bar,
    enable_model_summary=False,
)
trainer.fit(Module(), DataLoader(Slow(), batch_size=4))
