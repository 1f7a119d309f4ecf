# -*- coding: utf-8 -*-
"""小型卷积网络: Conv-BN-ReLU stem, a residual block, and a classifier head."""

from __future__ import annotations

import argparse
import functools

import torch
import torch.nn.functional as F
from torch import nn


def log_shapes(fn):
    """Decorator kept to check that fixes leave decorated methods alone."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn1(self.conv1(x))
        out = F.relu(out)  # 第一个激活
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)  # residual: x is read here, but out + x is a fresh tensor


class ConvNet(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.block = ResidualBlock(16)
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.ReLU(),  # after a view: must stay out-of-place
            nn.Dropout(0.0),
            nn.Linear(16 * 4 * 4, num_classes),
        )

    @log_shapes
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.block(x)
        x = F.dropout(x, p=0.0, training=self.training)
        x = F.adaptive_avg_pool2d(x, 4)
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    net = ConvNet()
    print(net(torch.randn(args.batch_size, 3, 16, 16)).shape)


if __name__ == "__main__":
    main()
