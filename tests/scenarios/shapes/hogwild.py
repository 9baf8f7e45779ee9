"""The Hogwild shape (pytorch/examples mnist_hogwild): the model's memory is shared and the
training runs in processes the script starts with torch.multiprocessing; the main process only
waits for them."""

import argparse

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--num-processes", type=int, default=2)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()


def train(rank, model):
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    data = DataLoader(TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,))), 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.epochs):
        for x, y in data:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    model.share_memory()
    processes = []
    for rank in range(args.num_processes):
        p = mp.Process(target=train, args=(rank, model))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    print("exit codes", [p.exitcode for p in processes])
