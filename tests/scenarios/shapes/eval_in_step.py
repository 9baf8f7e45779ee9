"""The shape of a full-batch graph network's loop (pytorch/examples' gcn has it): each step trains
once on the whole graph, then evaluates the model twice (the training and the validation nodes)
in eval mode under ``torch.no_grad()``. The evaluation costs ``--eval-ms`` for 80 nodes, injected
(70 and 30 ms): most of every step, the training nodes' pass the larger, beyond doubt. Written here, for torchdoctor's tests."""

import argparse
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=200)
parser.add_argument("--eval-ms", type=float, default=40.0)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
nodes, features, classes = 200, 32, 4
x = torch.randn(nodes, features)
adjacency = (torch.rand(nodes, nodes) < 0.05).float() + torch.eye(nodes)
adjacency = adjacency / adjacency.sum(1, keepdim=True)
labels = torch.randint(0, classes, (nodes,))
train_nodes, val_nodes = torch.arange(0, 140), torch.arange(140, 200)


class GraphNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(features, 64)
        self.second = nn.Linear(64, classes)

    def forward(self, x, adjacency):
        if not self.training:
            time.sleep(self.cost_ms / 1000)  # the evaluation's cost, injected
        hidden = torch.relu(adjacency @ self.first(x))
        return adjacency @ self.second(hidden)


model = GraphNet()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
criterion = nn.CrossEntropyLoss()


def test(mask):
    model.cost_ms = args.eval_ms * len(mask) / 80
    model.eval()
    with torch.no_grad():
        output = model(x, adjacency)
        loss = criterion(output[mask], labels[mask])
        accuracy = (output[mask].argmax(1) == labels[mask]).float().mean()
    return loss, accuracy


def train_step():
    model.train()
    optimizer.zero_grad()
    output = model(x, adjacency)
    loss = criterion(output[train_nodes], labels[train_nodes])
    loss.backward()
    optimizer.step()
    loss_train, acc_train = test(train_nodes)
    loss_val, acc_val = test(val_nodes)
    return loss_val


for epoch in range(args.epochs):
    train_step()
