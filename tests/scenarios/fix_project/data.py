"""The project's data module: a Dataset whose samples take 10 ms each, and the loader built from
module constants (torchdoctor fix changes ``WORKERS`` here, not in train.py)."""

import time

import torch
from torch.utils.data import DataLoader, Dataset

WORKERS = 0  # loader processes
BATCH = 4


class SlowSamples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.010)  # decoding, augmenting: the input pipeline's cost
        return torch.randn(32), torch.randint(0, 4, ()).item()


def make_loader():
    return DataLoader(
        SlowSamples(),
        batch_size=BATCH,
        shuffle=True,
        num_workers=WORKERS,
    )
