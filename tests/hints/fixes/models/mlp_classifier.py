"""一个简单的 MLP 分类器 (a small MLP classifier used by the fix tests)."""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """Two hidden layers; dropout after each activation."""

    def __init__(self, d_in: int = 32, hidden: int = 64, n_cls: int = 10, p: float = 0.1) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(p)  # 随机失活
        self.head = nn.Sequential(
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden, n_cls),
        )
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.act(self.fc1(x)))  # first block
        y = self.fc2(h)
        y = F.relu(y)
        y = F.dropout(y, p=self.p, training=self.training)
        z = F.dropout(F.relu(y + h), p=self.p, training=self.training)
        return self.head(z)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=1)
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args()
    model = MLP()
    print(model(torch.randn(4, 32)).shape)
