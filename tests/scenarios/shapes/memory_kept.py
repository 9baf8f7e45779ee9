"""The shape of a loop that keeps something of every step for its epoch's end: the features for
a metric (detached, 2 MB a step), or the outputs with their autograd graphs. Either way memory
grows step over step. Written here, for torchdoctor's tests."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--keep", choices=["features", "outputs", "nothing"], default="features")
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
loader = DataLoader(TensorDataset(torch.randn(8192, 64), torch.randn(8192, 1024)), batch_size=512)
model = nn.Linear(64, 1024)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for epoch in range(100):
    features, outputs = [], []
    for x, y in loader:
        out = model(x)
        loss = nn.functional.mse_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.keep == "features":
            features.append(out.detach().clone())  # kept for the epoch's metric
        elif args.keep == "outputs":
            outputs.append(out)  # kept with its graph
    print(f"epoch {epoch}: {len(features) + len(outputs)} kept")
