"""A DCGAN-shaped loop (pytorch/examples dcgan): a discriminator and a generator, each with its
own Adam, stepped in turn on every batch of real images; ``.item()`` logged every batch."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=50)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)

nz = 8
netG = nn.Sequential(nn.Linear(nz, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh())
netD = nn.Sequential(nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1), nn.Sigmoid())
criterion = nn.BCELoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
data = DataLoader(TensorDataset(torch.rand(512, 64) * 2 - 1), batch_size=16, shuffle=True)

for epoch in range(args.epochs):
    for i, (real,) in enumerate(data):
        netD.zero_grad()
        label = torch.full((real.size(0),), 1.0)
        errD_real = criterion(netD(real).view(-1), label)
        errD_real.backward()
        fake = netG(torch.randn(real.size(0), nz))
        label.fill_(0.0)
        errD_fake = criterion(netD(fake.detach()).view(-1), label)
        errD_fake.backward()
        optimizerD.step()

        netG.zero_grad()
        label.fill_(1.0)
        errG = criterion(netD(fake).view(-1), label)
        errG.backward()
        optimizerG.step()
        if i % 10 == 0:
            print(
                f"[{epoch}][{i}] Loss_D {(errD_real + errD_fake).item():.4f} Loss_G {errG.item():.4f}"
            )
