"""A GAN-style loop for ``load_robustness.py``: two small models, two optimizers, and per-sample
numpy work in ``__getitem__`` (no workers). Quiet, it is input-bound: the samples' work is
most of the step."""

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)


class Noisy(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        x = rng.standard_normal((32, 32)).astype(np.float32)
        for _ in range(6):  # per-sample work: a few FFT round trips
            x = np.real(np.fft.ifft2(np.fft.fft2(x) * 0.99)).astype(np.float32)
        return torch.from_numpy(x[None].repeat(3, 0))


G = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1))
D = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(2048, 1))
opt_g = torch.optim.Adam(G.parameters(), 1e-3)
opt_d = torch.optim.Adam(D.parameters(), 1e-3)
bce = nn.BCEWithLogitsLoss()
for _epoch in range(1000):
    for real in DataLoader(Noisy(), batch_size=8, shuffle=True):
        fake = G(torch.randn_like(real))
        d_loss = bce(D(real), torch.ones(8, 1)) + bce(D(fake.detach()), torch.zeros(8, 1))
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = bce(D(fake), torch.ones(8, 1))
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
