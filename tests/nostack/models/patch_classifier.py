"""An image classifier trained data-parallel: the first model of the no-stack mapping harness
(tests/nostack/jobs.py describes its profiled run; the tests parse this file, never run it).

Runs on an NPU with torch_npu, else on the CPU (one process, gloo) so it stays a real script.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

try:
    import torch_npu  # noqa: F401

    DEVICE = "npu"
except ImportError:
    DEVICE = "cpu"

NUM_CLASSES = 1000
WIDTH = 32
IMAGE = 32


class Stem(nn.Module):
    def __init__(self, channels: int = 3, width: int = WIDTH) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x))))


class Head(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int, p: float = 0.2) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = self.drop(self.act(self.fc1(x)))
        return self.fc2(x)


class PatchClassifier(nn.Module):
    def __init__(self, classes: int = NUM_CLASSES, hidden: int = 512) -> None:
        super().__init__()
        self.stem = Stem()
        self.mix = nn.Conv2d(WIDTH, 2 * WIDTH, 3, padding=1)
        self.head = Head(2 * WIDTH * (IMAGE // 4) ** 2, hidden, classes)

    def forward(self, x):
        x = self.stem(x)
        x = F.max_pool2d(self.mix(x), 2)
        x = torch.flatten(x, 1)
        return self.head(x)


def train(args) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("hccl" if DEVICE == "npu" else "gloo", rank=0, world_size=1)
    images = torch.randn(args.batch_size * args.steps, 3, IMAGE, IMAGE)
    labels = torch.randint(0, NUM_CLASSES, (args.batch_size * args.steps,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size, shuffle=True)
    model = DistributedDataParallel(PatchClassifier().to(DEVICE))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(loader):
        x, y = x.to(DEVICE), y.to(DEVICE)
        loss = criterion(model(x), y)
        spread = y.double().std()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f} label spread {spread:.1f}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    train(parser.parse_args())


if __name__ == "__main__":
    main()
