"""A residual CNN trained data-parallel with two gradient buckets: a model of the no-stack zoo
(tests/nostack/zoo.py describes its profiled run; the tests parse this file, never run it).

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

CLASSES = 100
WIDTH = 64
IMAGE = 32


class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class ResNetSmall(nn.Module):
    def __init__(self, depth: int = 2) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, WIDTH, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(WIDTH)
        self.blocks = nn.ModuleList([BasicBlock(WIDTH) for _ in range(depth)])
        self.fc = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        for block in self.blocks:
            x = block(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def train(args) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("hccl" if DEVICE == "npu" else "gloo", rank=0, world_size=1)
    images = torch.randn(args.batch_size * args.steps, 3, IMAGE, IMAGE)
    labels = torch.randint(0, CLASSES, (args.batch_size * args.steps,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size, shuffle=True)
    model = DistributedDataParallel(ResNetSmall().to(DEVICE), bucket_cap_mb=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step, (images, labels) in enumerate(loader):
        images, labels = images.to(DEVICE), labels.to(DEVICE)
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
        hits = (logits.argmax(1) == labels).double().sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.3f} acc {hits / len(labels):.3f}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    train(parser.parse_args())


if __name__ == "__main__":
    main()
