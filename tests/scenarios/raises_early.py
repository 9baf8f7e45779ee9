import torch

model = torch.nn.Linear(4, 2)


def build():
    raise ValueError("bad config: hidden size must be positive")


build()
