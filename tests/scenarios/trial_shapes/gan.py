"""A GAN's loop: two models, two optimizers per iteration. Its first optimizer step ends the step
torchdoctor sees, so a lever applied or undone there changes half an iteration: what the
generator made under autocast reaches the discriminator after the trial is undone."""

import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(0)
G = nn.Sequential(nn.ConvTranspose2d(8, 16, 4, 2, 1), nn.ReLU(), nn.Conv2d(16, 3, 3, padding=1))
D = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(16, 1, 4), nn.Flatten())
opt_g = torch.optim.Adam(G.parameters(), 1e-3)
opt_d = torch.optim.Adam(D.parameters(), 1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(100000):
    real, z = torch.randn(8, 3, 8, 8), torch.randn(8, 8, 4, 4)
    fake = G(z)
    d_loss = bce(D(real), torch.ones(8, 1)) + bce(D(fake.detach()), torch.zeros(8, 1))
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = bce(D(fake), torch.ones(8, 1))
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
