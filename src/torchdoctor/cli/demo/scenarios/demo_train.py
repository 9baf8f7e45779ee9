"""The demo's training script: a small image classifier, slow or fixed.

``--variant slow`` has the classic problems: every sample is a JPEG decoded and resized with PIL
in ``__getitem__``, normalised as float32 on the CPU, loaded with ``num_workers=0``; and the loss
is the seed-004 custom loss (a weight tensor built from a Python list every step, an ``assert``
on a tensor value, indexing with a Python ``range``).

``--variant fixed`` reads the same images from a uint8 cache made once offline, keeps batches
uint8, normalises inside the model (on the device), and uses the fused ``nn.CrossEntropyLoss``
with its class weights built once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

NUM_CLASSES = 10
SIZE = 64
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CLASS_WEIGHTS = [1.0, 1.2, 0.8, 1.0, 1.1, 0.9, 1.0, 1.3, 0.7, 1.0]


class JpegFolder(Dataset):
    """class_name/*.jpg, decoded and resized per sample: the slow pipeline."""

    def __init__(self, root: str) -> None:
        self.classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
        self.files = [
            (path, label)
            for label, name in enumerate(self.classes)
            for path in sorted((Path(root) / name).glob("*.jpg"))
        ]

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        from PIL import Image

        path, label = self.files[i]
        with Image.open(path) as img:
            img = img.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
            x = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        x = (x - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
        return x, label


class SlowWeightedLoss(nn.Module):
    """Seed 004's loss, with its three host round-trips."""

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        weight = torch.tensor(CLASS_WEIGHTS, device=logits.device)  # rebuilt every step
        assert target.max() < NUM_CLASSES  # reads a device value on the host
        log_probs = logits.log_softmax(dim=1)
        picked = log_probs[range(len(target)), target]  # Python range: copied every step
        w = weight[target]
        return -(w * picked).sum() / w.sum()


class Net(nn.Module):
    def __init__(self, normalize: nn.Module | None = None) -> None:
        super().__init__()
        self.normalize = normalize
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(4),
        )
        self.head = nn.Linear(16 * 8 * 8, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.normalize is not None:
            x = self.normalize(x)
        return self.head(self.features(x).flatten(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="image folder (slow) or cache (fixed)")
    parser.add_argument("--variant", choices=("slow", "fixed"), default="slow")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    device = device or torch.device("cpu")

    if args.variant == "slow":
        loader = DataLoader(JpegFolder(args.data), batch_size=args.batch_size, shuffle=True)
        model = Net().to(device)
        loss_fn = SlowWeightedLoss()
    else:
        from torchdoctor.remedies import CachedDataset, Normalize, uint8_collate

        loader = DataLoader(
            CachedDataset(args.data),
            batch_size=args.batch_size,
            shuffle=True,
            collate_fn=uint8_collate,
        )
        model = Net(Normalize(MEAN, STD)).to(device)
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(CLASS_WEIGHTS, device=device))

    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
