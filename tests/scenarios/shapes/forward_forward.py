"""The forward-forward shape (pytorch/examples mnist_forward_forward): each layer is trained by
its own optimizer in a loop of its own, and runs through ``self.forward(x)``, never through a
module call, so no module hook fires."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2000)
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.relu = torch.nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)
        self.threshold = 2.0

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train_layer(self, x_pos, x_neg):
        for _ in range(args.epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log(
                1 + torch.exp(torch.cat([-g_pos + self.threshold, g_neg - self.threshold]))
            ).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class Net(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = nn.ModuleList(Layer(dims[d], dims[d + 1]) for d in range(len(dims) - 1))

    def train_net(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for layer in self.layers:
            h_pos, h_neg = layer.train_layer(h_pos, h_neg)


net = Net([64, 512, 512])
x_pos, x_neg = torch.randn(256, 64), torch.randn(256, 64)
net.train_net(x_pos, x_neg)
print("done")
