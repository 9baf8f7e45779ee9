"""Lightning's Trainer with the DDP strategy on 2 CPU processes, launched by torchrun (Lightning
reads the ranks torchrun sets). Lightning builds ``DistributedDataParallel(module=model, ...)``
by keyword; its Dataset calls a module transform in the main process (0 workers)."""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl


class Scale(nn.Module):
    def forward(self, x):
        return x * 0.5


class Samples(Dataset):
    def __init__(self):
        self.x = torch.randn(512, 16)
        self.y = torch.randint(0, 4, (512,))
        self.transform = Scale()

    def __len__(self):
        return 512

    def __getitem__(self, i):
        return self.transform(self.x[i]), self.y[i]


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    torch.set_num_threads(1)
    trainer = pl.Trainer(
        max_epochs=50,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), DataLoader(Samples(), batch_size=8))
